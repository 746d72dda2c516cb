//! Several hosts in one connection string, as libpq lists them, and
//! `target_session_attrs`: which of them a session may use.
//!
//! - URL: `postgres://u@h1:p1,h2,[::1]:p3/db`: each entry has its own port
//!   (the default when it has none).
//! - key/value: `host=h1,h2 port=p1,p2`: as many ports as hosts, or one
//!   port for every host; an empty entry is the default host or port.
//!   A single `port=` value is parsed as before lists existed (an empty
//!   one is an error).
//! - `target_session_attrs`: `any`, `read-write`, `primary`, `read-only`,
//!   `standby` or `prefer-standby`. `read-write` is taken as `primary`
//!   and `read-only` as `standby`: a replication session cannot ask
//!   `transaction_read_only`, and the server's role (`in_hot_standby`) is
//!   what matters to a follower.
//!
//! Invariant: a [`HostList`] has at least one host, and every entry is a
//! whole single-host [`ConnString`] (user, password, database, ... shared).

use super::{bad, parse_port, ConnString, ConnStringError, DEFAULT_HOST, DEFAULT_PORT};

/// What a server is, as far as choosing one goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Primary,
    /// In recovery (`in_hot_standby = on`).
    Standby,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Standby => "standby",
        }
    }
}

/// libpq's `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetSessionAttrs {
    Any,
    ReadWrite,
    Primary,
    ReadOnly,
    Standby,
    PreferStandby,
}

/// The next thing to do when choosing a host ([`TargetSessionAttrs::next_step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Connect to host `i` and learn its role.
    Probe(usize),
    /// Use host `i`.
    Take(usize),
    /// No host fits.
    Exhausted,
}

impl TargetSessionAttrs {
    pub fn parse(value: &str) -> Result<TargetSessionAttrs, ConnStringError> {
        Ok(match value {
            "any" => TargetSessionAttrs::Any,
            "read-write" => TargetSessionAttrs::ReadWrite,
            "primary" => TargetSessionAttrs::Primary,
            "read-only" => TargetSessionAttrs::ReadOnly,
            "standby" => TargetSessionAttrs::Standby,
            "prefer-standby" => TargetSessionAttrs::PreferStandby,
            other => {
                return Err(bad(format!(
                    "target_session_attrs '{other}': expected any, read-write, primary, \
                     read-only, standby or prefer-standby"
                )))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::Primary => "primary",
            TargetSessionAttrs::ReadOnly => "read-only",
            TargetSessionAttrs::Standby => "standby",
            TargetSessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// The passes over the hosts, in order: a host of the pass's role
    /// (`None`: any role) is taken.
    fn passes(self) -> &'static [Option<Role>] {
        match self {
            TargetSessionAttrs::Any => &[None],
            TargetSessionAttrs::ReadWrite | TargetSessionAttrs::Primary => &[Some(Role::Primary)],
            TargetSessionAttrs::ReadOnly | TargetSessionAttrs::Standby => &[Some(Role::Standby)],
            TargetSessionAttrs::PreferStandby => &[Some(Role::Standby), None],
        }
    }

    /// Given the hosts in the `order` to try them and what probing has
    /// said so far (`probed[i]`: `None` not yet, `Some(None)` unusable,
    /// `Some(Some(role))` usable), the next step. Each host is probed at
    /// most once; hosts are probed lazily, in order, pass by pass.
    pub fn next_step(self, order: &[usize], probed: &[Option<Option<Role>>]) -> Step {
        for want in self.passes() {
            for &i in order {
                match probed[i] {
                    None => return Step::Probe(i),
                    Some(None) => continue,
                    Some(Some(role)) if want.is_none_or(|w| w == role) => return Step::Take(i),
                    Some(Some(_)) => continue,
                }
            }
        }
        Step::Exhausted
    }
}

/// A connection string with one or more hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    /// At least one; each a whole single-host connection string.
    pub hosts: Vec<ConnString>,
    /// As given; `None`: not given.
    pub target_session_attrs: Option<TargetSessionAttrs>,
}

impl HostList {
    /// The default when `target_session_attrs` is not given: a follower
    /// fed by a standby can never be ahead of a standby that is promoted.
    /// With one host it is the same as `any`.
    pub const DEFAULT_ATTRS: TargetSessionAttrs = TargetSessionAttrs::PreferStandby;

    /// Either form, told apart by the `postgres://` or `postgresql://` prefix.
    pub fn parse(s: &str) -> Result<HostList, ConnStringError> {
        let s = s.trim();
        let parsed = match s.strip_prefix("postgres://").or_else(|| s.strip_prefix("postgresql://"))
        {
            Some(rest) => super::parse_url(rest)?,
            None if s.contains('=') || s.is_empty() => super::parse_key_value(s)?,
            None => {
                return Err(bad(format!(
                    "'{s}' is neither a postgres:// URL nor a list of key=value pairs"
                )))
            }
        };
        parsed.finish()
    }

    /// The only host; several are an error that names them.
    pub fn single(mut self) -> Result<ConnString, ConnStringError> {
        if self.hosts.len() > 1 {
            let addrs: Vec<String> = self.hosts.iter().map(ConnString::addr).collect();
            return Err(bad(format!(
                "it lists {} hosts ({}) where one is expected",
                addrs.len(),
                addrs.join(", ")
            )));
        }
        Ok(self.hosts.remove(0))
    }

    /// `target_session_attrs`, or [`HostList::DEFAULT_ATTRS`].
    pub fn attrs(&self) -> TargetSessionAttrs {
        self.target_session_attrs.unwrap_or(HostList::DEFAULT_ATTRS)
    }

    /// A URL without the password, for logs and APIs:
    /// `postgres://user@h1:p1,h2:p2/db[?target_session_attrs=...]`.
    pub fn redacted(&self) -> String {
        let first = &self.hosts[0];
        let addrs: Vec<String> = self.hosts.iter().map(ConnString::addr).collect();
        let db = first.dbname.as_deref().map(|d| format!("/{d}")).unwrap_or_default();
        let attrs = self
            .target_session_attrs
            .map(|a| format!("?target_session_attrs={}", a.as_str()))
            .unwrap_or_default();
        format!("postgres://{}@{}{db}{attrs}", first.user, addrs.join(","))
    }
}

/// What parsing collected before the host list is put together.
#[derive(Default)]
pub(super) struct Parsed {
    pub cs: ConnString,
    /// One entry per listed host; `None`: the default host.
    pub hosts: Vec<Option<String>>,
    /// Empty, one for all hosts, or one per host; `None`: the default.
    pub ports: Vec<Option<u16>>,
    pub attrs: Option<TargetSessionAttrs>,
}

impl Parsed {
    /// Applies one `key=value` setting (shared by both forms).
    pub fn set(&mut self, key: &str, value: String) -> Result<(), ConnStringError> {
        match key {
            "host" | "hostaddr" => {
                let mut hosts = Vec::new();
                for h in value.split(',') {
                    if h.starts_with('/') {
                        return Err(bad(format!("{key} '{h}': Unix sockets are not supported")));
                    }
                    hosts.push(Some(h.to_string()).filter(|h| !h.is_empty()));
                }
                self.hosts = hosts;
            }
            "port" if !value.contains(',') => self.ports = vec![Some(parse_port(&value)?)],
            "port" => {
                let ports = value.split(',').map(|p| match p {
                    "" => Ok(None),
                    p => parse_port(p).map(Some),
                });
                self.ports = ports.collect::<Result<_, _>>()?;
            }
            "target_session_attrs" => self.attrs = Some(TargetSessionAttrs::parse(&value)?),
            _ => self.cs.set(key, value)?,
        }
        Ok(())
    }

    fn finish(mut self) -> Result<HostList, ConnStringError> {
        if self.hosts.is_empty() {
            self.hosts.push(None);
        }
        let n = self.hosts.len();
        let ports = match self.ports.len() {
            0 => vec![None; n],
            1 => vec![self.ports[0]; n],
            m if m == n => self.ports,
            m => {
                return Err(bad(format!(
                    "{n} hosts but {m} ports: give one port for every host, or one per host"
                )))
            }
        };
        let hosts = self.hosts.into_iter().zip(ports).map(|(host, port)| ConnString {
            host: host.unwrap_or_else(|| DEFAULT_HOST.to_string()),
            port: port.unwrap_or(DEFAULT_PORT),
            ..self.cs.clone()
        });
        Ok(HostList { hosts: hosts.collect(), target_session_attrs: self.attrs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(l: &HostList) -> Vec<String> {
        l.hosts.iter().map(ConnString::addr).collect()
    }

    #[test]
    fn url_with_several_hosts() {
        let l = HostList::parse(
            "postgres://u:pw@h1:5433,h2,[::1]:7000/db?target_session_attrs=primary",
        )
        .unwrap();
        assert_eq!(addrs(&l), ["h1:5433", "h2:5432", "[::1]:7000"]);
        assert!(l.hosts.iter().all(|h| h.user == "u"
            && h.password.as_deref() == Some("pw")
            && h.dbname.as_deref() == Some("db")));
        assert_eq!(l.target_session_attrs, Some(TargetSessionAttrs::Primary));
        assert_eq!(
            l.redacted(),
            "postgres://u@h1:5433,h2:5432,[::1]:7000/db?target_session_attrs=primary"
        );
        assert!(!format!("{l:?}").contains("pw"));
        let e = ConnString::parse("postgres://u@h1:1,h2:2/db").unwrap_err().to_string();
        assert!(e.contains("it lists 2 hosts (h1:1, h2:2) where one is expected"), "{e}");
    }

    #[test]
    fn key_value_with_several_hosts() {
        let l = HostList::parse("host=a,b,c port=1,2,3 user=r").unwrap();
        assert_eq!(addrs(&l), ["a:1", "b:2", "c:3"]);
        assert_eq!(l.attrs(), TargetSessionAttrs::PreferStandby);
        assert_eq!(l.redacted(), "postgres://r@a:1,b:2,c:3");
        // One port for all hosts, as libpq allows; empty entries are defaults.
        let l = HostList::parse("host=a,b port=6000").unwrap();
        assert_eq!(addrs(&l), ["a:6000", "b:6000"]);
        let l = HostList::parse("host=a,,b port=1,,3 target_session_attrs=any").unwrap();
        assert_eq!(addrs(&l), ["a:1", "127.0.0.1:5432", "b:3"]);
        assert_eq!(l.attrs(), TargetSessionAttrs::Any);
        // A single host is what it was before lists.
        let l = HostList::parse("host=a port=6000").unwrap();
        assert_eq!(l.clone().single().unwrap().addr(), "a:6000");
        assert_eq!(l.hosts.len(), 1);
        assert_eq!(HostList::parse("").unwrap().single().unwrap(), ConnString::default());
    }

    #[test]
    fn bad_host_lists_are_named() {
        for (s, needle) in [
            ("host=a,b,c port=1,2", "3 hosts but 2 ports"),
            ("host=a,b port=1,x", "bad port 'x'"),
            ("host=a,/tmp port=1", "host '/tmp': Unix sockets are not supported"),
            ("postgres://a:1,b:zz/db", "bad port 'zz'"),
            ("host=a target_session_attrs=master", "target_session_attrs 'master': expected"),
            ("port=", "bad port ''"),
        ] {
            let e = HostList::parse(s).expect_err(s).to_string();
            assert!(e.starts_with("bad connection string: ") && e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn target_session_attrs_choose_hosts() {
        use Role::*;
        use Step::*;
        let order = [0, 1, 2];
        let all_probed = [Some(Some(Primary)), Some(None), Some(Some(Standby))];
        let cases = [
            (TargetSessionAttrs::Any, Take(0)),
            (TargetSessionAttrs::Primary, Take(0)),
            (TargetSessionAttrs::ReadWrite, Take(0)),
            (TargetSessionAttrs::Standby, Take(2)),
            (TargetSessionAttrs::ReadOnly, Take(2)),
            (TargetSessionAttrs::PreferStandby, Take(2)),
        ];
        for (attrs, want) in cases {
            assert_eq!(attrs.next_step(&order, &all_probed), want, "{attrs:?}");
        }
        // Lazily: the first host not probed yet is probed first.
        let none = [None, None, None];
        assert_eq!(TargetSessionAttrs::PreferStandby.next_step(&[2, 0, 1], &none), Probe(2));
        let first = [Some(Some(Primary)), None, None];
        assert_eq!(TargetSessionAttrs::Any.next_step(&order, &first), Take(0));
        assert_eq!(TargetSessionAttrs::PreferStandby.next_step(&order, &first), Probe(1));
        // No standby: prefer-standby falls back to the primary, standby finds none.
        let no_standby = [Some(Some(Primary)), Some(None), Some(None)];
        assert_eq!(TargetSessionAttrs::PreferStandby.next_step(&order, &no_standby), Take(0));
        assert_eq!(TargetSessionAttrs::Standby.next_step(&order, &no_standby), Exhausted);
        assert_eq!(TargetSessionAttrs::Any.next_step(&order, &[Some(None); 3]), Exhausted);
    }
}
