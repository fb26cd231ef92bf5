package receiver

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/klauspost/compress/gzip"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TracesPath is where OTLP/HTTP exporters send traces.
const TracesPath = "/v1/traces"

// The OTLP/HTTP content types.
const (
	contentProtobuf = "application/x-protobuf"
	contentJSON     = "application/json"
)

// Handler serves OTLP/HTTP at TracesPath: POST with a protobuf or JSON
// export request, gzip-compressed or not, bounded by MaxRequestBytes
// before and after decompression. It answers as the protocol says: 200
// with an export response in the request's encoding; an error as a
// google.rpc.Status in it, with 400 for a request that does not decode,
// 413 over the limit, 415 for another content type, 405 for another
// method and 404 elsewhere.
func (r *Receiver) Handler() http.Handler {
	return http.HandlerFunc(r.serveHTTP)
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if ct != contentJSON {
		ct = contentProtobuf // errors to other content types go as protobuf, OTLP's default
	}
	switch {
	case req.URL.Path != TracesPath:
		r.fail(w, ct, http.StatusNotFound, codes.NotFound, "OTLP/HTTP traces are received at "+TracesPath)
		return
	case req.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		r.fail(w, ct, http.StatusMethodNotAllowed, codes.Unimplemented, "OTLP/HTTP export requests are POSTs")
		return
	}
	if got, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); got != contentProtobuf && got != contentJSON {
		r.fail(w, ct, http.StatusUnsupportedMediaType, codes.InvalidArgument,
			fmt.Sprintf("content type %q: OTLP/HTTP sends %s or %s", req.Header.Get("Content-Type"), contentProtobuf, contentJSON))
		return
	}
	body, err := r.readBody(w, req)
	if err != nil {
		if errors.Is(err, errTooLarge) {
			r.fail(w, ct, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, err.Error())
			return
		}
		r.fail(w, ct, http.StatusBadRequest, codes.InvalidArgument, err.Error())
		return
	}
	var msg collectortracepb.ExportTraceServiceRequest
	if err := decode(ct, body, &msg); err != nil {
		r.fail(w, ct, http.StatusBadRequest, codes.InvalidArgument, "export request does not decode: "+err.Error())
		return
	}
	r.accept(msg.GetResourceSpans())
	reply(w, ct, http.StatusOK, &collectortracepb.ExportTraceServiceResponse{})
}

// readBody reads the request's body, decompressed, within the limit.
func (r *Receiver) readBody(w http.ResponseWriter, req *http.Request) ([]byte, error) {
	if req.ContentLength > int64(r.max) {
		return nil, errTooLarge
	}
	var in io.Reader = http.MaxBytesReader(w, req.Body, int64(r.max))
	switch enc := req.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(in)
		if err != nil {
			return nil, tooLargeOr(err, "gzip")
		}
		defer zr.Close()
		in = zr
	default:
		return nil, fmt.Errorf("content encoding %q: OTLP/HTTP allows gzip", enc)
	}
	body, err := io.ReadAll(io.LimitReader(in, int64(r.max)+1))
	if err != nil {
		return nil, tooLargeOr(err, "body")
	}
	if len(body) > r.max {
		return nil, errTooLarge
	}
	return body, nil
}

// tooLargeOr is errTooLarge when err is the size limit's, else err as a
// reading error.
func tooLargeOr(err error, what string) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errTooLarge
	}
	return fmt.Errorf("reading the %s: %w", what, err)
}

// decode reads an export request: protobuf directly, JSON through pdata
// (OTLP's JSON writes ids in hex, which protojson does not read).
func decode(ct string, body []byte, msg *collectortracepb.ExportTraceServiceRequest) error {
	if ct == contentJSON {
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalJSON(body); err != nil {
			return err
		}
		b, err := req.MarshalProto()
		if err != nil {
			return err
		}
		body = b
	}
	return proto.Unmarshal(body, msg)
}

// fail counts a refused request and answers it.
func (r *Receiver) fail(w http.ResponseWriter, ct string, httpStatus int, code codes.Code, msg string) {
	switch httpStatus {
	case http.StatusRequestEntityTooLarge:
		r.refuse(RefusedTooLarge)
	case http.StatusBadRequest:
		r.refuse(RefusedMalformed)
	default:
		r.refuse(RefusedUnsupported)
	}
	reply(w, ct, httpStatus, &spb.Status{Code: int32(code), Message: msg})
}

// reply writes m in the encoding ct names.
func reply(w http.ResponseWriter, ct string, httpStatus int, m proto.Message) {
	var b []byte
	if ct == contentJSON {
		b, _ = protojson.Marshal(m)
	} else {
		b, _ = proto.Marshal(m)
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(httpStatus)
	_, _ = w.Write(b)
}
