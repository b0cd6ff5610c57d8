//! protected-mode: while the default user needs no password, only
//! loopback clients are served (Redis 7.0's `clientAcceptHandler`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub const DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Redis's `islocalClient`: the peer is exactly 127.0.0.1 or ::1 (so a
/// client from 127.0.0.2 counts as remote).
pub fn is_local(peer: SocketAddr) -> bool {
    match peer.ip() {
        IpAddr::V4(ip) => ip == Ipv4Addr::LOCALHOST,
        IpAddr::V6(ip) => ip == Ipv6Addr::LOCALHOST,
    }
}

/// True when a client from `peer` must be refused.
pub fn refuses(protected_mode: bool, default_nopass: bool, peer: SocketAddr) -> bool {
    protected_mode && default_nopass && !is_local(peer)
}
