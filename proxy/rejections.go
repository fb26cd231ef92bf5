package proxy

import (
	"encoding/json"
	"strconv"

	"github.com/valyala/fasthttp"

	"github.com/ttftlens/ttftlens/gateway"
)

// rejectGateway answers a request the gateway refused, with the
// rejection's status, Retry-After and OpenAI-style body, and finishes it.
func (x *exchange) rejectGateway(ctx *fasthttp.RequestCtx, rej *gateway.Rejection) {
	x.fin.facts.Rejected, x.fin.facts.RejectedDetail = rej.Reason, rej.Detail
	x.fin.rec.Error = rej.Message
	x.scratch = rej.AppendJSON(x.scratch[:0])
	x.respondJSON(ctx, rej.Status, x.scratch)
	if rej.RetryAfter > 0 {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(rej.RetryAfter))
	}
	x.finish()
}

// respondJSON writes a whole JSON response.
func (x *exchange) respondJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("X-Request-Id", x.fin.rec.RequestID)
	ctx.SetBody(body)
	x.fin.rec.Status = status
	x.fin.rec.BytesOut = int64(len(body))
}

// respondError writes an OpenAI-style error body whose code is the end
// detail the record will carry.
func (x *exchange) respondError(ctx *fasthttp.RequestCtx, status int, typ, msg string) {
	code := string(x.fin.detailGuess(x.ctl.aborted()))
	body, _ := json.Marshal(openAIError{Error: openAIErrorBody{Message: msg, Type: typ, Code: code}})
	x.respondJSON(ctx, status, body)
}

type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}
