"""Route handlers, one module per protocol (the table is `server.routes`): each turns its wire
shape into a `Call` (or answers from the gateway's state) and the reply back into a `Response`."""
