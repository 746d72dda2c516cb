//! Parsing of the `--page-service-connstring` URL.
//!
//! Accepted form: `postgres[ql]://[user[:password]@]host[:port][/dbname][?k=v&...]`.
//! Only `application_name` and `options` are recognised as query parameters;
//! anything else is rejected so that a typo does not silently change a run.
//! The password (a JWT when the page service uses `pg_auth_type = "jwt"`) is
//! sent only if the server asks for a cleartext password.

use anyhow::{bail, Context};

/// Everything needed to open one libpq session to the page service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnString {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: Option<String>,
    pub application_name: String,
    pub options: Option<String>,
}

impl ConnString {
    /// `host:port` for `TcpStream::connect`.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn parse(s: &str) -> anyhow::Result<ConnString> {
        let rest = s
            .strip_prefix("postgres://")
            .or_else(|| s.strip_prefix("postgresql://"))
            .with_context(|| format!("connstring '{s}' must start with postgres://"))?;
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q)),
            None => (rest, None),
        };
        let (authority, dbname) = match rest.split_once('/') {
            Some((a, d)) if !d.is_empty() => (a, Some(percent_decode(d)?)),
            Some((a, _)) => (a, None),
            None => (rest, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, pw)) => (percent_decode(user)?, Some(percent_decode(pw)?)),
                None => (percent_decode(u)?, None),
            },
            None => ("postgres".to_string(), None),
        };
        let (host, port) = split_host_port(hostport)?;
        let mut cs = ConnString {
            host,
            port,
            user: if user.is_empty() { "postgres".to_string() } else { user },
            password,
            dbname,
            application_name: "pagebench".to_string(),
            options: None,
        };
        if let Some(q) = query {
            for kv in q.split('&').filter(|kv| !kv.is_empty()) {
                let (k, v) = kv
                    .split_once('=')
                    .with_context(|| format!("connstring parameter '{kv}' has no '='"))?;
                let v = percent_decode(v)?;
                match k {
                    "application_name" => cs.application_name = v,
                    "options" => cs.options = Some(v),
                    _ => bail!("connstring parameter '{k}' is not supported"),
                }
            }
        }
        Ok(cs)
    }

    /// StartupMessage parameters in the order they are sent.
    pub fn startup_params(&self) -> Vec<(&str, &str)> {
        let mut params = vec![("user", self.user.as_str())];
        if let Some(db) = &self.dbname {
            params.push(("database", db.as_str()));
        }
        params.push(("application_name", self.application_name.as_str()));
        if let Some(o) = &self.options {
            params.push(("options", o.as_str()));
        }
        params
    }
}

fn split_host_port(hostport: &str) -> anyhow::Result<(String, u16)> {
    if hostport.is_empty() {
        return Ok(("127.0.0.1".to_string(), 64000));
    }
    if let Some(rest) = hostport.strip_prefix('[') {
        let (host, after) = rest.split_once(']').context("unterminated '[' in connstring host")?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().with_context(|| format!("bad port '{p}'"))?,
            None if after.is_empty() => 5432,
            None => bail!("garbage after ']' in connstring host"),
        };
        return Ok((host.to_string(), port));
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_string(), p.parse().with_context(|| format!("bad port '{p}'"))?)),
        None => Ok((hostport.to_string(), 5432)),
    }
}

fn percent_decode(s: &str) -> anyhow::Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).with_context(|| format!("bad escape in '{s}'"))?;
            out.push(u8::from_str_radix(hex, 16).with_context(|| format!("bad escape in '{s}'"))?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).with_context(|| format!("'{s}' is not UTF-8 once decoded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neon_default() {
        let cs = ConnString::parse("postgres://postgres@127.0.0.1:64000").unwrap();
        assert_eq!(cs.host, "127.0.0.1");
        assert_eq!(cs.port, 64000);
        assert_eq!(cs.user, "postgres");
        assert_eq!(cs.password, None);
        assert_eq!(cs.dbname, None);
        assert_eq!(cs.addr(), "127.0.0.1:64000");
    }

    #[test]
    fn full_form() {
        let cs = ConnString::parse(
            "postgresql://u%40x:p%3Aw@[::1]:7000/db?application_name=a%20b&options=-c%20x",
        )
        .unwrap();
        assert_eq!(cs.user, "u@x");
        assert_eq!(cs.password.as_deref(), Some("p:w"));
        assert_eq!(cs.host, "::1");
        assert_eq!(cs.addr(), "[::1]:7000");
        assert_eq!(cs.dbname.as_deref(), Some("db"));
        assert_eq!(cs.application_name, "a b");
        assert_eq!(cs.options.as_deref(), Some("-c x"));
        assert_eq!(
            cs.startup_params(),
            vec![
                ("user", "u@x"),
                ("database", "db"),
                ("application_name", "a b"),
                ("options", "-c x")
            ]
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert!(ConnString::parse("mysql://x").is_err());
        assert!(ConnString::parse("postgres://h:notaport").is_err());
        assert!(ConnString::parse("postgres://h:1?sslmode=require").is_err());
        assert!(ConnString::parse("postgres://h:1/%zz").is_err());
    }
}
