package deploytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	grafanamodel "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	grafanaprometheus "github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The panel and query plugins whose models the check knows. A panel of
// another type fails it: add that plugin's package here (the SDK has one
// per core plugin: stat, table, ...) so its options are checked too.
func init() {
	runtime := cog.NewRuntime()
	runtime.RegisterPanelcfgVariant(timeseries.VariantConfig())
	runtime.RegisterDataqueryVariant(grafanaprometheus.VariantConfig())
}

// grafanaPanel is the part of a panel (or row) the check walks itself.
type grafanaPanel struct {
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	FieldConfig json.RawMessage `json:"fieldConfig"`
	Panels      []grafanaPanel  `json:"panels"`
	Targets     []struct {
		Datasource struct {
			Type string `json:"type"`
		} `json:"datasource"`
	} `json:"targets"`
}

// grafanaRequire is one entry of __requires, the plugins Grafana's import
// checks for; it and __inputs are import metadata, not the dashboard model.
type grafanaRequire struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// checkGrafanaDashboard holds a dashboard to Grafana's own model, through
// the Grafana Foundation SDK's strict decoders: every field of the
// dashboard, its variables and panels, each panel's options (the panel
// plugin's own type), field config defaults and overrides, and each
// query (the Prometheus query type) must be one the model has, of its
// type. What the SDK decodes leniently (a field config's defaults, the
// overrides' properties) is decoded strictly here.
func checkGrafanaDashboard(raw []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return err
	}
	var requires []grafanaRequire
	if r, ok := top["__requires"]; ok {
		dec := json.NewDecoder(bytes.NewReader(r))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&requires); err != nil {
			return fmt.Errorf("__requires: %w", err)
		}
	}
	delete(top, "__requires")
	model, _ := json.Marshal(top)
	//lint:ignore SA1019 our dashboards are the classic JSON model, which dashboardv2 does not read
	var d grafanamodel.Dashboard
	if err := sdkErr(d.UnmarshalJSONStrict(model)); err != nil {
		return err
	}
	if err := sdkErr(d.Validate()); err != nil {
		return err
	}
	var walk struct {
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(model, &walk); err != nil {
		return err
	}
	used := map[string]bool{}
	var errs []error
	var check func(ps []grafanaPanel)
	check = func(ps []grafanaPanel) {
		for _, p := range ps {
			check(p.Panels)
			if p.Type == "row" {
				continue
			}
			used["panel/"+p.Type] = true
			for _, q := range p.Targets {
				used["datasource/"+q.Datasource.Type] = true
			}
			if _, ok := cog.NewRuntime().ConfigForPanelcfgVariant(p.Type); !ok {
				errs = append(errs, fmt.Errorf("panel %q: type %q has no model registered in this check", p.Title, p.Type))
				continue
			}
			if err := checkFieldConfig(p.Type, p.FieldConfig); err != nil {
				errs = append(errs, fmt.Errorf("panel %q: %w", p.Title, err))
			}
		}
	}
	check(walk.Panels)
	for key := range used {
		kind, id, _ := strings.Cut(key, "/")
		if !slices.ContainsFunc(requires, func(r grafanaRequire) bool { return r.Type == kind && r.ID == id }) {
			errs = append(errs, fmt.Errorf("__requires does not list the %s %q the dashboard uses", kind, id))
		}
	}
	return errors.Join(errs...)
}

// checkFieldConfig decodes a panel's field config strictly: its defaults
// into the dashboard's FieldConfig, their custom part into the panel
// plugin's own field config, and each override property as the defaults
// it overrides ("custom.lineWidth": 2 is defaults.custom.lineWidth).
func checkFieldConfig(panelType string, raw json.RawMessage) error {
	if raw == nil {
		return nil
	}
	var fc struct {
		Defaults  json.RawMessage `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	}
	if err := json.Unmarshal(raw, &fc); err != nil {
		return err
	}
	if err := checkFieldDefaults(panelType, fc.Defaults); err != nil {
		return fmt.Errorf("fieldConfig.defaults: %w", err)
	}
	for i, o := range fc.Overrides {
		for _, prop := range o.Properties {
			nested := prop.Value
			path := strings.Split(prop.ID, ".")
			for j := len(path) - 1; j >= 0; j-- {
				nested, _ = json.Marshal(map[string]json.RawMessage{path[j]: nested})
			}
			if err := checkFieldDefaults(panelType, nested); err != nil {
				return fmt.Errorf("fieldConfig.overrides[%d] property %q: %w", i, prop.ID, err)
			}
		}
	}
	return nil
}

// checkFieldDefaults decodes one field config (defaults) strictly.
func checkFieldDefaults(panelType string, defaults json.RawMessage) error {
	var fc grafanamodel.FieldConfig
	if err := sdkErr(fc.UnmarshalJSONStrict(defaults)); err != nil {
		return err
	}
	var custom struct {
		Custom json.RawMessage `json:"custom"`
	}
	if err := json.Unmarshal(defaults, &custom); err != nil || custom.Custom == nil {
		return err
	}
	variant, _ := cog.NewRuntime().ConfigForPanelcfgVariant(panelType)
	if variant.StrictFieldConfigUnmarshaler == nil {
		return fmt.Errorf("panel type %q: no strict field config model", panelType)
	}
	_, err := variant.StrictFieldConfigUnmarshaler(custom.Custom)
	return sdkErr(err)
}

// sdkErr is err, or nil for the empty error list the SDK's strict decoders
// return when all is well (a nil slice in a non-nil error).
func sdkErr(err error) error {
	var errs cog.BuildErrors
	if errors.As(err, &errs) && len(errs) == 0 {
		return nil
	}
	return err
}

// TestDashboardGrafanaModel holds deploy/grafana/ttftlens.json to Grafana's
// model of a dashboard (its queries are checked on a real Prometheus by
// TestDashboardAndRulesOnPrometheus).
func TestDashboardGrafanaModel(t *testing.T) {
	raw, err := os.ReadFile("../grafana/ttftlens.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkGrafanaDashboard(raw); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardGrafanaModelRefuses: what Grafana would drop (a field its
// model does not have) or cannot read (a value of the wrong type) fails
// the check, in every part of the dashboard it covers.
func TestDashboardGrafanaModelRefuses(t *testing.T) {
	raw, err := os.ReadFile("../grafana/ttftlens.json")
	if err != nil {
		t.Fatal(err)
	}
	// firstPanel is the first panel that is not a row.
	firstPanel := func(d map[string]any) map[string]any {
		for _, p := range d["panels"].([]any) {
			if p := p.(map[string]any); p["type"] != "row" {
				return p
			}
		}
		t.Fatal("no panel")
		return nil
	}
	at := func(m map[string]any, path ...string) map[string]any {
		for _, k := range path {
			m = m[k].(map[string]any)
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		want   string // in the error: what was changed
		mutate func(d map[string]any)
	}{
		{"misspelled panel option", "displayModee", func(d map[string]any) {
			at(firstPanel(d), "options", "legend")["displayModee"] = "table"
		}},
		{"panel option of the wrong type", "showLegend", func(d map[string]any) {
			at(firstPanel(d), "options", "legend")["showLegend"] = "yes"
		}},
		{"misspelled field config default", "unitt", func(d map[string]any) {
			at(firstPanel(d), "fieldConfig", "defaults")["unitt"] = "s"
		}},
		{"misspelled time series field option", "lineWidthh", func(d map[string]any) {
			at(firstPanel(d), "fieldConfig", "defaults", "custom")["lineWidthh"] = 2
		}},
		{"override of an option that does not exist", "lineWidthh", func(d map[string]any) {
			fc := at(firstPanel(d), "fieldConfig")
			fc["overrides"] = append(fc["overrides"].([]any), map[string]any{
				"matcher":    map[string]any{"id": "byName", "options": "x"},
				"properties": []any{map[string]any{"id": "custom.lineWidthh", "value": 2}},
			})
		}},
		{"override value of the wrong type", "fillOpacity", func(d map[string]any) {
			fc := at(firstPanel(d), "fieldConfig")
			fc["overrides"] = append(fc["overrides"].([]any), map[string]any{
				"matcher":    map[string]any{"id": "byName", "options": "x"},
				"properties": []any{map[string]any{"id": "custom.fillOpacity", "value": "half"}},
			})
		}},
		{"misspelled query field", "legendFormatt", func(d map[string]any) {
			firstPanel(d)["targets"].([]any)[0].(map[string]any)["legendFormatt"] = "{{upstream}}"
		}},
		{"misspelled panel field", "descripton", func(d map[string]any) { firstPanel(d)["descripton"] = "x" }},
		{"panel type without a model", "timeserie", func(d map[string]any) { firstPanel(d)["type"] = "timeserie" }},
		{"misspelled dashboard field", "refresh_", func(d map[string]any) { d["refresh_"] = "10s" }},
		{"misspelled variable field", "includeAl", func(d map[string]any) {
			at(d, "templating")["list"].([]any)[0].(map[string]any)["includeAl"] = true
		}},
		{"plugin missing from __requires", "__requires", func(d map[string]any) { d["__requires"] = []any{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d map[string]any
			if err := json.Unmarshal(raw, &d); err != nil {
				t.Fatal(err)
			}
			tc.mutate(d)
			bad, _ := json.Marshal(d)
			if err := checkGrafanaDashboard(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the changed dashboard: %v, want an error about %s", err, tc.want)
			}
		})
	}
}
