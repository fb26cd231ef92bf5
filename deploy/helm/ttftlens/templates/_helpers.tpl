{{/* The chart's name, at most 63 characters (a DNS label). */}}
{{- define "ttftlens.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release name, with the chart's name unless it already holds it. */}}
{{- define "ttftlens.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The labels that select the pods: the Deployment's selector, the Service's, the PDB's, the spread's, the NetworkPolicy's. */}}
{{- define "ttftlens.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ttftlens.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Every object's labels. */}}
{{- define "ttftlens.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "ttftlens.selectorLabels" . }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ttftlens container, in both modes: the gateway's only container, or the engine's sidecar. */}}
{{- define "ttftlens.container" -}}
{{- $t := .Values.ttftlens -}}
- name: ttftlens
  image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if and (eq .Values.mode "sidecar") .Values.sidecar.native }}
  restartPolicy: Always
  {{- end }}
  args:
    - serve
    - --listen=:{{ $t.httpPort }}
    - --admin-listen=:{{ $t.adminPort }}
    {{- if eq .Values.mode "gateway" }}
    - --config=/etc/ttftlens/gateway.yaml
    {{- else }}
    - --upstream=http://127.0.0.1:{{ .Values.sidecar.engine.port }}
    {{- end }}
    - --engine={{ $t.engine }}
    {{- with $t.scrapeEngineMetrics }}
    - --scrape-engine-metrics={{ . }}
    {{- end }}
    - --first-token-timeout={{ $t.firstTokenTimeout }}
    {{- $spans := .Values.ttftlens.receiveSpans }}
    {{- if include "ttftlens.receiveSpans" . }}
    - --receive-otlp-grpc={{ include "ttftlens.receiveSpansAddress" . }}
    - --receive-otlp-wait={{ $spans.waitSeconds }}s
    # The streams' grace, then the last record's wait for its span.
    - --shutdown-grace={{ add .Values.shutdown.graceSeconds $spans.waitSeconds }}s
    {{- else }}
    - --shutdown-grace={{ .Values.shutdown.graceSeconds }}s
    {{- end }}
    - --log-level={{ $t.logLevel }}
    {{- with $t.extraArgs }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $q := .Values.gateway.sharedQuota }}
  {{- $redisPassword := and (eq .Values.mode "gateway") $q.enabled $q.passwordSecret.name }}
  {{- if or $t.env $redisPassword }}
  env:
    {{- with $t.env }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
    {{- if $redisPassword }}
    # The shared quotas' Redis password (the config's env:TTFTLENS_REDIS_PASSWORD).
    - name: TTFTLENS_REDIS_PASSWORD
      valueFrom:
        secretKeyRef: {name: {{ $q.passwordSecret.name }}, key: {{ $q.passwordSecret.key }}}
    {{- end }}
  {{- end }}
  {{- with $t.envFrom }}
  envFrom:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - {name: http, containerPort: {{ $t.httpPort }}}
    - {name: admin, containerPort: {{ $t.adminPort }}}
    {{- if and (include "ttftlens.receiveSpans" .) (eq .Values.mode "gateway") }}
    - {name: otlp-grpc, containerPort: {{ $t.receiveSpans.port }}}
    {{- end }}
  # Listening: the admin listener answers once serve has started.
  startupProbe:
    httpGet: {path: /health, port: admin}
    periodSeconds: 1
    failureThreshold: 30
  # Ready: the proxy's own /health, on the clients' port.
  readinessProbe:
    httpGet: {path: /health, port: http}
    periodSeconds: 5
  # Alive: the proxy only, never the upstream (a slow engine must not
  # restart the proxy in front of it).
  livenessProbe:
    httpGet: {path: /health, port: admin}
    periodSeconds: 10
    failureThreshold: 3
  {{- /* A native sidecar is stopped after the engine: the engine's preStop does the waiting. */}}
  {{- if and .Values.shutdown.preStopSleepSeconds (not (and (eq .Values.mode "sidecar") .Values.sidecar.native)) }}
  lifecycle:
    preStop:
      sleep: {seconds: {{ .Values.shutdown.preStopSleepSeconds }}}
  {{- end }}
  {{- if eq .Values.mode "gateway" }}
  resources:
    {{- toYaml .Values.gateway.resources | nindent 4 }}
  volumeMounts:
    - {name: config, mountPath: /etc/ttftlens, readOnly: true}
  {{- else }}
  resources:
    {{- toYaml $t.resources | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $t.securityContext | nindent 4 }}
{{- end }}

{{/* The pod's termination grace: preStop, then the streams' grace and the last records' wait for their spans, then a margin (values.yaml, shutdown). */}}
{{- define "ttftlens.terminationGracePeriodSeconds" -}}
{{- $wait := 0 }}
{{- if include "ttftlens.receiveSpans" . }}
{{- $wait = .Values.ttftlens.receiveSpans.waitSeconds }}
{{- end }}
{{- add .Values.shutdown.preStopSleepSeconds .Values.shutdown.graceSeconds $wait .Values.shutdown.marginSeconds }}
{{- end }}

{{/* "true" when ttftlens receives the engines' spans (receiveSpans.enabled; auto: in sidecar mode beside an engine it points at the receiver), else empty. Fails for a gateway of more than one replica, whose spans would reach one replica while the others hold the records. */}}
{{- define "ttftlens.receiveSpans" -}}
{{- $on := .Values.ttftlens.receiveSpans.enabled }}
{{- if eq (toString $on) "auto" }}
{{- $on = and (eq .Values.mode "sidecar") (ne .Values.sidecar.engine.spans "none") }}
{{- end }}
{{- if $on }}
{{- $g := .Values.gateway }}
{{- if and (eq .Values.mode "gateway") (or $g.autoscaling.enabled (gt (int $g.replicas) 1)) }}
{{- fail "ttftlens.receiveSpans in gateway mode needs one replica (gateway.replicas: 1, gateway.autoscaling.enabled: false): an engine sends all its spans to one address, and a span joins only the record of the replica that served its request" }}
{{- end }}
{{- true }}
{{- end }}
{{- end }}

{{/* The receiver's address: loopback beside the engine, the pod's IP in a gateway. */}}
{{- define "ttftlens.receiveSpansAddress" -}}
{{- if eq .Values.mode "sidecar" }}127.0.0.1{{ end }}:{{ .Values.ttftlens.receiveSpans.port }}
{{- end }}

{{/* The engine's flags that send its spans to the receiver on loopback (sidecar.engine.spans). */}}
{{- define "ttftlens.engineSpanArgs" -}}
{{- $addr := printf "127.0.0.1:%v" .Values.ttftlens.receiveSpans.port }}
{{- $kind := .Values.sidecar.engine.spans }}
{{- if eq $kind "vllm" }}
- --otlp-traces-endpoint=http://{{ $addr }}
{{- else if eq $kind "sglang" }}
- --enable-trace
- --otlp-traces-endpoint={{ $addr }}
{{- else if eq $kind "tgi" }}
- --otlp-endpoint=http://{{ $addr }}
{{- end }}
{{- end }}
