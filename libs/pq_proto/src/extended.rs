//! Pure decoders of the extended query protocol's frontend messages:
//! Parse (`P`), Bind (`B`), Describe (`D`), Execute (`E`) and Close (`C`).
//! Sync (`S`) and Flush (`H`) have no body.
//!
//! Invariants: no decoder panics on any input; counts are checked against
//! the bytes actually present before anything is allocated for them; a
//! message with trailing bytes is refused. A malformed body is an error of
//! the message, not of the session: [`QueryError::Command`] with SQLSTATE
//! `08P01` naming the message and what was wrong, as PostgreSQL reports it
//! (ERROR, then the server skips to the next Sync).

use crate::error::{sqlstate, QueryError};

/// Parse: a statement name (empty: the unnamed one), the query text and
/// the parameter types the client declared (OIDs, 0 = unspecified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parse<'a> {
    pub statement: &'a str,
    pub query: &'a str,
    pub param_types: Vec<u32>,
}

/// Bind: a portal name, the statement it binds, the parameter values
/// (`None` is NULL; their formats are not kept: a bound parameter is
/// refused anyway by our commands) and the result column format codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind<'a> {
    pub portal: &'a str,
    pub statement: &'a str,
    pub params: Vec<Option<&'a [u8]>>,
    /// 0 codes: all text; 1 code: for every column; else one per column.
    pub result_formats: Vec<i16>,
}

/// What Describe and Close are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `S`: a prepared statement.
    Statement,
    /// `P`: a portal.
    Portal,
}

impl Target {
    pub fn noun(self) -> &'static str {
        match self {
            Target::Statement => "prepared statement",
            Target::Portal => "portal",
        }
    }
}

/// Describe or Close of a statement or portal by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Named<'a> {
    pub target: Target,
    pub name: &'a str,
}

/// Execute: a portal and the row limit (0: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execute<'a> {
    pub portal: &'a str,
    pub max_rows: i32,
}

/// A reader over one message body that names the message in its errors.
struct Body<'a> {
    message: &'static str,
    rest: &'a [u8],
}

impl<'a> Body<'a> {
    fn new(message: &'static str, rest: &'a [u8]) -> Body<'a> {
        Body { message, rest }
    }

    fn malformed(&self, what: impl std::fmt::Display) -> QueryError {
        QueryError::command(
            sqlstate::PROTOCOL_VIOLATION,
            format!("malformed {} message: {what}", self.message),
        )
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], QueryError> {
        if self.rest.len() < n {
            let left = self.rest.len();
            return Err(self.malformed(format!("{what}: {n} bytes needed, {left} left")));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8, QueryError> {
        Ok(self.take(1, what)?[0])
    }

    fn i16(&mut self, what: &str) -> Result<i16, QueryError> {
        Ok(i16::from_be_bytes(self.take(2, what)?.try_into().unwrap()))
    }

    fn i32(&mut self, what: &str) -> Result<i32, QueryError> {
        Ok(i32::from_be_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    /// A count of items of at least `item_bytes` each, checked against the
    /// bytes left so that a lying count allocates nothing.
    fn count(&mut self, what: &str, item_bytes: usize) -> Result<usize, QueryError> {
        let n = self.i16(what)?;
        let Ok(n) = usize::try_from(n) else {
            return Err(self.malformed(format!("negative {what} {n}")));
        };
        if n * item_bytes > self.rest.len() {
            return Err(self.malformed(format!(
                "{what} {n} does not fit in the {} bytes left",
                self.rest.len()
            )));
        }
        Ok(n)
    }

    fn cstr(&mut self, what: &str) -> Result<&'a str, QueryError> {
        let Some(nul) = self.rest.iter().position(|&b| b == 0) else {
            return Err(self.malformed(format!("{what} has no NUL terminator")));
        };
        let Ok(s) = std::str::from_utf8(&self.rest[..nul]) else {
            return Err(self.malformed(format!("{what} is not UTF-8")));
        };
        self.rest = &self.rest[nul + 1..];
        Ok(s)
    }

    fn finish(self) -> Result<(), QueryError> {
        if !self.rest.is_empty() {
            return Err(self.malformed(format!("{} trailing bytes", self.rest.len())));
        }
        Ok(())
    }
}

pub fn parse_parse(body: &[u8]) -> Result<Parse<'_>, QueryError> {
    let mut b = Body::new("Parse", body);
    let statement = b.cstr("statement name")?;
    let query = b.cstr("query string")?;
    let n = b.count("parameter type count", 4)?;
    let mut param_types = Vec::with_capacity(n);
    for _ in 0..n {
        param_types.push(b.i32("parameter type")? as u32);
    }
    b.finish()?;
    Ok(Parse { statement, query, param_types })
}

pub fn parse_bind(body: &[u8]) -> Result<Bind<'_>, QueryError> {
    let mut b = Body::new("Bind", body);
    let portal = b.cstr("portal name")?;
    let statement = b.cstr("statement name")?;
    let n_formats = b.count("parameter format count", 2)?;
    for _ in 0..n_formats {
        b.i16("parameter format")?;
    }
    let n_params = b.count("parameter count", 4)?;
    let mut params = Vec::with_capacity(n_params);
    for i in 0..n_params {
        let len = b.i32("parameter length")?;
        match len {
            -1 => params.push(None),
            len if len < 0 => {
                return Err(b.malformed(format!("parameter {} has length {len}", i + 1)))
            }
            len => params.push(Some(b.take(len as usize, "parameter value")?)),
        }
    }
    let n_results = b.count("result format count", 2)?;
    let mut result_formats = Vec::with_capacity(n_results);
    for _ in 0..n_results {
        result_formats.push(b.i16("result format")?);
    }
    b.finish()?;
    Ok(Bind { portal, statement, params, result_formats })
}

/// The body of Describe or Close (`message` names which in errors).
pub fn parse_named<'a>(message: &'static str, body: &'a [u8]) -> Result<Named<'a>, QueryError> {
    let mut b = Body::new(message, body);
    let target = match b.u8("target")? {
        b'S' => Target::Statement,
        b'P' => Target::Portal,
        other => {
            return Err(b.malformed(format!(
                "target '{}' is neither 'S' (statement) nor 'P' (portal)",
                other.escape_ascii()
            )))
        }
    };
    let name = b.cstr("name")?;
    b.finish()?;
    Ok(Named { target, name })
}

pub fn parse_execute(body: &[u8]) -> Result<Execute<'_>, QueryError> {
    let mut b = Body::new("Execute", body);
    let portal = b.cstr("portal name")?;
    let max_rows = b.i32("row limit")?;
    b.finish()?;
    Ok(Execute { portal, max_rows })
}

/// Sync and Flush carry nothing.
pub fn parse_empty(message: &'static str, body: &[u8]) -> Result<(), QueryError> {
    Body::new(message, body).finish()
}

#[cfg(test)]
mod tests;
