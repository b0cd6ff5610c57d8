//! A connection on a TLS listener: the handshake first, then it is served
//! as any other connection, its socket loop reading plaintext.

use crate::conn;
use crate::core::Core;
use crate::log;
use crate::session::Port;
use crate::stream::ClientStream;
use crate::tls::stream::TlsStream;
use rustls::ServerConfig;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A client that connects and never completes the handshake holds a socket
/// and a task; it gets this long.
const HANDSHAKE_LIMIT: Duration = Duration::from_secs(10);

pub async fn serve(core: Rc<Core>, stream: ClientStream, port: Port, config: Arc<ServerConfig>) {
    let addrs = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(a), Ok(l)) => format!("addr={a} laddr={l}"),
        _ => String::new(),
    };
    // As Redis: no Nagle from the first byte, the handshake's flights too.
    let _ = stream.set_nodelay(true);
    let mut tls = match TlsStream::server(stream, config) {
        Ok(tls) => tls,
        Err(e) => return log::warning(&format!("Error creating a TLS connection: {e}")),
    };
    let deadline = Instant::now() + HANDSHAKE_LIMIT;
    let given_up = async {
        // Shutdown does not wait for a handshake (the connection is not a
        // client yet, so nothing else would hang it up).
        while !core.process.shutting_down() && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
        Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake not completed in time"))
    };
    match futures_lite::future::or(tls.handshake(), given_up).await {
        Ok(()) => conn::serve(core, ClientStream::Tls(Box::new(tls)), port).await,
        Err(e) => log::verbose(&format!("Error accepting a client connection: {e} ({addrs})")),
    }
}
