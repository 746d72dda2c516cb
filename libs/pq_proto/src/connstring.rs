//! Connection strings, in libpq's two forms:
//!
//! - URL: `postgres[ql]://[user[:password]@][host][:port][/dbname][?key=value&...]`
//!   (percent-encoded; an IPv6 host in brackets);
//! - key/value: `host=h port=5432 user=u password='a b' dbname=d`
//!   (values in single quotes may hold spaces; `\'` and `\\` escape).
//!
//! Keys understood (in both forms): `host`, `hostaddr`, `port`, `user`,
//! `password`, `dbname`, `application_name`, `options`, `connect_timeout`
//! (seconds), `replication`, `target_session_attrs` and `sslmode`
//! (`disable`, `allow` or `prefer`: this client has no TLS, so anything
//! stronger is refused). Any other key is an error, so that a typo does not
//! silently change a connection.
//!
//! Several hosts, as libpq lists them (`hosts.rs`: [`HostList`]):
//! `postgres://u@h1:p1,h2:p2/db` or `host=h1,h2 port=p1,p2` (one port for
//! every host, or one per host; an empty entry is the default).
//! [`ConnString::parse`] wants one host and names the hosts otherwise;
//! [`HostList::parse`] takes any number.
//!
//! Only TCP is supported: the host defaults to `127.0.0.1` (not a Unix
//! socket as in libpq), the port to 5432, the user to `postgres`.
//! The password never appears in `Debug` output.

use std::time::Duration;

mod hosts;
pub use hosts::{HostList, Role, Step, TargetSessionAttrs};

/// A connection string that could not be parsed; the message names the
/// part that was wrong.
#[derive(Debug, thiserror::Error)]
#[error("bad connection string: {0}")]
pub struct ConnStringError(String);

fn bad(message: impl Into<String>) -> ConnStringError {
    ConnStringError(message.into())
}

pub const DEFAULT_HOST: &str = "127.0.0.1";
pub const DEFAULT_PORT: u16 = 5432;
pub const DEFAULT_USER: &str = "postgres";
/// Bound on TCP connect + startup + authentication unless `connect_timeout`
/// says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything needed to open one libpq session over TCP.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnString {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: Option<String>,
    pub application_name: Option<String>,
    pub options: Option<String>,
    /// The `replication` startup parameter as given (`true`, `database`...).
    pub replication: Option<String>,
    pub connect_timeout: Duration,
}

impl std::fmt::Debug for ConnString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnString")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("dbname", &self.dbname)
            .field("application_name", &self.application_name)
            .field("options", &self.options)
            .field("replication", &self.replication)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl Default for ConnString {
    fn default() -> ConnString {
        ConnString {
            host: DEFAULT_HOST.to_string(),
            port: DEFAULT_PORT,
            user: DEFAULT_USER.to_string(),
            password: None,
            dbname: None,
            application_name: None,
            options: None,
            replication: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

impl std::str::FromStr for ConnString {
    type Err = ConnStringError;
    fn from_str(s: &str) -> Result<ConnString, ConnStringError> {
        ConnString::parse(s)
    }
}

impl ConnString {
    /// Either form, told apart by the `postgres://` or `postgresql://`
    /// prefix; one host (several are refused, naming them).
    pub fn parse(s: &str) -> Result<ConnString, ConnStringError> {
        HostList::parse(s)?.single()
    }

    /// A URL of this connection without its password, for logs and APIs:
    /// `postgres://user@host:port/db`.
    pub fn redacted(&self) -> String {
        let db = self.dbname.as_deref().map(|d| format!("/{d}")).unwrap_or_default();
        format!("postgres://{}@{}{db}", self.user, self.addr())
    }

    /// `host:port` for `TcpStream::connect`.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// StartupMessage parameters in the order they are sent.
    pub fn startup_params(&self) -> Vec<(&str, &str)> {
        let mut params = vec![("user", self.user.as_str())];
        if let Some(db) = &self.dbname {
            params.push(("database", db.as_str()));
        }
        if let Some(a) = &self.application_name {
            params.push(("application_name", a.as_str()));
        }
        if let Some(o) = &self.options {
            params.push(("options", o.as_str()));
        }
        if let Some(r) = &self.replication {
            params.push(("replication", r.as_str()));
        }
        params
    }

    /// Applies one `key=value` setting other than the host list's
    /// (shared by both forms).
    fn set(&mut self, key: &str, value: String) -> Result<(), ConnStringError> {
        match key {
            "user" => self.user = value,
            "password" => self.password = Some(value),
            "dbname" => self.dbname = Some(value),
            "application_name" => self.application_name = Some(value),
            "options" => self.options = Some(value),
            "replication" => self.replication = Some(value),
            "connect_timeout" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| bad(format!("connect_timeout '{value}' is not a number")))?;
                // libpq treats 0 as "wait forever"; keep a bound anyway.
                self.connect_timeout = match secs {
                    0 => DEFAULT_CONNECT_TIMEOUT,
                    s => Duration::from_secs(s),
                };
            }
            "sslmode" => match value.as_str() {
                "disable" | "allow" | "prefer" => {}
                other => {
                    return Err(bad(format!("sslmode '{other}': this client does not do TLS")))
                }
            },
            other => return Err(bad(format!("parameter '{other}' is not supported"))),
        }
        Ok(())
    }
}

fn parse_port(p: &str) -> Result<u16, ConnStringError> {
    match p.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(bad(format!("bad port '{p}'"))),
    }
}

fn parse_url(rest: &str) -> Result<hosts::Parsed, ConnStringError> {
    let mut p = hosts::Parsed::default();
    let cs = &mut p.cs;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, dbname) = match rest.split_once('/') {
        Some((a, d)) if !d.is_empty() => (a, Some(percent_decode(d)?)),
        Some((a, _)) => (a, None),
        None => (rest, None),
    };
    cs.dbname = dbname;
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    if let Some(u) = userinfo {
        let (user, password) = match u.split_once(':') {
            Some((user, pw)) => (percent_decode(user)?, Some(percent_decode(pw)?)),
            None => (percent_decode(u)?, None),
        };
        if !user.is_empty() {
            cs.user = user;
        }
        cs.password = password;
    }
    for entry in hostport.split(',') {
        let (host, port) = split_host_port(entry)?;
        p.hosts.push(host);
        p.ports.push(port);
    }
    for kv in query.unwrap_or("").split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) =
            kv.split_once('=').ok_or_else(|| bad(format!("parameter '{kv}' has no '='")))?;
        p.set(&percent_decode(k)?, percent_decode(v)?)?;
    }
    Ok(p)
}

/// One `host[:port]` entry of a URL: the host (`None`: the default) and
/// the port (`None`: the default).
fn split_host_port(hostport: &str) -> Result<(Option<String>, Option<u16>), ConnStringError> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) =
            rest.split_once(']').ok_or_else(|| bad("unterminated '[' in the host"))?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(bad(format!("garbage '{after}' after ']' in the host"))),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    let host = percent_decode(host)?;
    let port = port.map(parse_port).transpose()?;
    Ok((Some(host).filter(|h| !h.is_empty()), port))
}

fn percent_decode(s: &str) -> Result<String, ConnStringError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let byte = s
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| bad(format!("bad %-escape in '{s}'")))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad(format!("'{s}' is not UTF-8 once decoded")))
}

fn parse_key_value(s: &str) -> Result<hosts::Parsed, ConnStringError> {
    let mut p = hosts::Parsed::default();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(p);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|&c| c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(bad(format!("'{key}' is not followed by '='")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(bad(format!("unterminated quoted value of '{key}'"))),
                    Some('\'') => break,
                    Some('\\') => {
                        value.push(chars.next().ok_or_else(|| bad("trailing backslash"))?)
                    }
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next().ok_or_else(|| bad("trailing backslash"))?);
                } else {
                    value.push(c);
                }
            }
        }
        p.set(&key, value)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_minimal() {
        let cs = ConnString::parse("postgres://postgres@127.0.0.1:64000").unwrap();
        assert_eq!(cs.host, "127.0.0.1");
        assert_eq!(cs.port, 64000);
        assert_eq!(cs.user, "postgres");
        assert_eq!(cs.password, None);
        assert_eq!(cs.dbname, None);
        assert_eq!(cs.addr(), "127.0.0.1:64000");
        assert_eq!(cs.startup_params(), vec![("user", "postgres")]);
        let cs = ConnString::parse("postgresql://").unwrap();
        assert_eq!(cs, ConnString::default());
    }

    #[test]
    fn url_full() {
        let cs = ConnString::parse(
            "postgresql://u%40x:p%3Aw@[::1]:7000/db?application_name=a%20b&options=-c%20x\
             &replication=true&connect_timeout=3&sslmode=disable",
        )
        .unwrap();
        assert_eq!(cs.user, "u@x");
        assert_eq!(cs.password.as_deref(), Some("p:w"));
        assert_eq!(cs.host, "::1");
        assert_eq!(cs.addr(), "[::1]:7000");
        assert_eq!(cs.dbname.as_deref(), Some("db"));
        assert_eq!(cs.connect_timeout, Duration::from_secs(3));
        assert_eq!(
            cs.startup_params(),
            vec![
                ("user", "u@x"),
                ("database", "db"),
                ("application_name", "a b"),
                ("options", "-c x"),
                ("replication", "true"),
            ]
        );
        assert!(!format!("{cs:?}").contains("p:w"), "Debug shows the password");
    }

    #[test]
    fn key_value() {
        let cs = ConnString::parse(
            " host=10.0.0.1 port = 6543 user=repl password='it''s' dbname=postgres",
        );
        // A doubled quote is not an escape in libpq either: '' ends the value.
        assert!(cs.is_err());
        let cs = ConnString::parse(
            "host=10.0.0.1 port = 6543 user=repl password='it\\'s a\\\\b' dbname=postgres \
             application_name=x\\ y",
        )
        .unwrap();
        assert_eq!(cs.addr(), "10.0.0.1:6543");
        assert_eq!(cs.user, "repl");
        assert_eq!(cs.password.as_deref(), Some("it's a\\b"));
        assert_eq!(cs.dbname.as_deref(), Some("postgres"));
        assert_eq!(cs.application_name.as_deref(), Some("x y"));
        assert_eq!(ConnString::parse("").unwrap(), ConnString::default());
        assert_eq!(ConnString::parse("password=''").unwrap().password.as_deref(), Some(""));
    }

    #[test]
    fn rejects_bad_input() {
        for s in [
            "mysql://x",
            "postgres://h:notaport",
            "postgres://h:0",
            "postgres://h:1?sslmode=require",
            "postgres://h:1?sslmod=disable",
            "postgres://h:1/%zz",
            "postgres://h:1/db?x",
            "postgres://[::1",
            "host=/var/run/postgresql",
            "host=a port=99999",
            "host=a password='open",
            "host",
            "host=a bogus=1",
            "connect_timeout=soon",
        ] {
            let e = ConnString::parse(s).expect_err(s);
            assert!(e.to_string().starts_with("bad connection string: "), "{s}: {e}");
        }
    }
}
