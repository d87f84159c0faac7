//! Which `Host` and `Origin` headers name this machine: the one reading of them that the host
//! endpoint's and the admin API's DNS-rebinding checks share (a page that rebinds its own name to
//! 127.0.0.1 still sends its own name in `Host` and `Origin`).

/// `localhost`, `127.x.x.x` or `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.chars().all(|c| c.is_ascii_digit()) {
                h
            } else {
                host
            }
        })
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An origin (`scheme://host[:port]`) on a loopback host, any port.
pub fn is_loopback_origin(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    is_loopback_host(rest.trim_end_matches('/'))
}

/// Whether `origin` is one a page served by a listener on loopback port `port` has:
/// `http://127.0.0.1:PORT`, `http://localhost:PORT` or `http://[::1]:PORT`. A page of another
/// local server (another port) is another origin.
pub fn is_own_origin(origin: &str, port: u16) -> bool {
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    let Some((host, p)) = rest.trim_end_matches('/').rsplit_once(':') else {
        return false;
    };
    p.parse::<u16>().is_ok_and(|p| p == port)
        && (host == "127.0.0.1" || host.eq_ignore_ascii_case("localhost") || host == "[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_and_origins() {
        for ok in [
            "localhost",
            "localhost:7332",
            "127.0.0.1:80",
            "[::1]:9",
            "[::1]",
            "127.1.2.3",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in ["evil.com", "evil.com:80", "10.0.0.1", "localhost.evil.com"] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://localhost:3000"));
        assert!(!is_loopback_origin("https://evil.example"));
        assert!(!is_loopback_origin("null"));
    }

    #[test]
    fn own_origin_is_this_port_on_a_loopback_name() {
        for ok in [
            "http://127.0.0.1:7333",
            "http://localhost:7333",
            "http://LOCALHOST:7333/",
            "http://[::1]:7333",
        ] {
            assert!(is_own_origin(ok, 7333), "{ok}");
        }
        for bad in [
            "http://127.0.0.1:7332",
            "https://127.0.0.1:7333",
            "http://evil.example:7333",
            "http://127.0.0.1",
            "null",
            "http://localhost.evil.example:7333",
        ] {
            assert!(!is_own_origin(bad, 7333), "{bad}");
        }
    }
}
