package endreason

// Refusal is why the proxy turned away a request it could not read far
// enough to record (no method and path yet), or a connection over a cap.
// Refusals are counted, not recorded; the values are metric labels and
// the code of the error body the client gets.
type Refusal string

// Why a request's head was refused: answered with an error (an idle
// preconnect excepted), then the connection is closed.
const (
	RefusedHeadersTooLarge Refusal = "headers_too_large" // the request line and headers over the header limit (431)
	RefusedMalformed       Refusal = "malformed"         // not an HTTP/1.x request head fasthttp can parse (400)
	RefusedTimeout         Refusal = "timeout"           // the head not sent within the read timeout (408)
	RefusedIncomplete      Refusal = "incomplete"        // the client closed or reset the connection in the middle of its request
	RefusedIdlePreconnect  Refusal = "idle_preconnect"   // a connection that sent nothing within the read timeout: closed unanswered
)

// Why a connection was refused as it was accepted.
const (
	RefusedConnLimit      Refusal = "connection_limit"            // the proxy holds its maximum of client connections (503)
	RefusedPerClientLimit Refusal = "per_client_connection_limit" // the client's address holds its maximum (429)
)

// RequestRefusals returns the refusals of a request's head, for
// pre-creating metric series.
func RequestRefusals() []Refusal {
	return []Refusal{RefusedHeadersTooLarge, RefusedMalformed, RefusedTimeout, RefusedIncomplete, RefusedIdlePreconnect}
}

// ConnectionRefusals returns the refusals of a connection.
func ConnectionRefusals() []Refusal {
	return []Refusal{RefusedConnLimit, RefusedPerClientLimit}
}
