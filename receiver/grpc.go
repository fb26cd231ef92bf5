package receiver

import (
	"context"
	"slices"

	collectortracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// GRPCServer returns a gRPC server offering OTLP's TraceService, with
// requests bounded by MaxRequestBytes (gzip-compressed ones included:
// grpc-go bounds the decompressed message too). A request it cannot
// read is answered as gRPC does (RESOURCE_EXHAUSTED over the limit,
// INTERNAL when it does not decode) and counted. The caller serves and
// stops it (Serve, GracefulStop).
func (r *Receiver) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(r.max)}, opts...)...)
	desc := collectortracepb.TraceService_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		desc.Methods[i].Handler = r.countDecodeErrors(desc.Methods[i].Handler)
	}
	s.RegisterService(&desc, traceService{r: r})
	return s
}

// countDecodeErrors wraps a generated method handler so that a request
// that fails to arrive whole (too big, not protobuf) is counted: grpc-go
// reads, bounds and decodes the message inside the handler's dec.
func (r *Receiver) countDecodeErrors(h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		return h(srv, ctx, func(m any) error {
			err := dec(m)
			switch {
			case err == nil:
			case status.Code(err) == codes.ResourceExhausted:
				r.refuse(RefusedTooLarge)
			case status.Code(err) == codes.Canceled, status.Code(err) == codes.DeadlineExceeded:
			default:
				r.refuse(RefusedMalformed)
			}
			return err
		}, ic)
	}
}

// traceService is OTLP's TraceService over the Receiver.
type traceService struct {
	collectortracepb.UnimplementedTraceServiceServer
	r *Receiver
}

// Export accepts every span it was sent: the consumer never refuses one,
// so the response reports no partial success.
func (t traceService) Export(_ context.Context, req *collectortracepb.ExportTraceServiceRequest) (*collectortracepb.ExportTraceServiceResponse, error) {
	t.r.accept(req.GetResourceSpans())
	return &collectortracepb.ExportTraceServiceResponse{}, nil
}
