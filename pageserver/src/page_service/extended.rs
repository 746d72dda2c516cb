//! The extended query protocol's per-session state, as PostgreSQL keeps
//! it: prepared statements (Parse) and portals (Bind), by name; the empty
//! name is the unnamed statement or portal, which the next Parse or Bind
//! of that name replaces.
//!
//! Semantics (PostgreSQL's, for the subset our commands need):
//! - a statement holds its parsed [`Command`]; our commands take no
//!   parameters, so a Parse that declares parameter types, or a Bind that
//!   supplies values, is an error naming the count;
//! - a named statement or portal must not exist already (42P05 / 42P03);
//!   Close of a missing one is not an error;
//! - portals end with the implicit transaction: Sync and a simple Query
//!   drop them all; a simple Query also drops the unnamed statement;
//! - result formats: 0 codes (text), 1 code (for every column) or one per
//!   column; 0 is text, 1 binary. Our columns are all of type `text`,
//!   whose binary form is the same bytes, so both are served;
//! - a portal runs once: our commands return at most one row, so an
//!   Execute never stops at its row limit (no PortalSuspended), and a
//!   second Execute of a portal that ran is an error (55000);
//! - bounds: [`MAX_STATEMENTS`] named statements and [`MAX_PORTALS`]
//!   portals per session; beyond, an error naming the bound (54000).
//!
//! Errors here are command-level: the connection sends ErrorResponse and
//! discards messages until Sync (`connection.rs`).

use std::collections::HashMap;

use bytes::BytesMut;
use pq_proto::backend as be;
use pq_proto::extended::{Bind, Named, Parse, Target};
use utils::quote::quote;

use super::command::Command;
use super::error::{sqlstate, QueryError};

/// Named prepared statements a session may hold (the unnamed one aside).
pub const MAX_STATEMENTS: usize = 64;
/// Portals a session may hold at once (the unnamed one included).
pub const MAX_PORTALS: usize = 64;

/// A bound statement, ready to run.
#[derive(Debug, Clone)]
pub(super) struct Portal {
    pub command: Command,
    /// One format code per result column (0 text, 1 binary).
    pub formats: Vec<i16>,
    ran: bool,
}

#[derive(Debug, Default)]
pub(super) struct ExtendedState {
    statements: HashMap<String, Command>,
    portals: HashMap<String, Portal>,
    /// Set by an error in an extended-protocol message; every message but
    /// Sync (and Terminate) is discarded while set.
    pub skip_until_sync: bool,
}

impl ExtendedState {
    /// Parse: store the statement, reply ParseComplete.
    pub fn parse(&mut self, msg: &Parse<'_>, out: &mut BytesMut) -> Result<(), QueryError> {
        if !msg.param_types.is_empty() {
            return Err(QueryError::command(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "Parse declares {} parameter types, but page service commands take no \
                     parameters",
                    msg.param_types.len()
                ),
            ));
        }
        let named = !msg.statement.is_empty();
        if !named {
            // Replaced even if the new one fails to parse, as in PostgreSQL.
            self.statements.remove("");
        }
        if named && self.statements.contains_key(msg.statement) {
            return Err(QueryError::command(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement {} already exists", quote(msg.statement)),
            ));
        }
        let named_count = self.statements.keys().filter(|k| !k.is_empty()).count();
        if named && named_count >= MAX_STATEMENTS {
            return Err(QueryError::command(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "too many prepared statements: a session holds at most {MAX_STATEMENTS}; \
                     close one (Close 'S') first"
                ),
            ));
        }
        let command = Command::parse(msg.query)?;
        self.statements.insert(msg.statement.to_string(), command);
        be::parse_complete(out);
        Ok(())
    }

    /// Bind: create the portal, reply BindComplete.
    pub fn bind(&mut self, msg: &Bind<'_>, out: &mut BytesMut) -> Result<(), QueryError> {
        let command = self.statement(msg.statement)?.clone();
        if !msg.params.is_empty() {
            return Err(QueryError::command(
                sqlstate::PROTOCOL_VIOLATION,
                format!(
                    "bind message supplies {} parameters, but prepared statement {} requires 0",
                    msg.params.len(),
                    quote(msg.statement)
                ),
            ));
        }
        if !msg.portal.is_empty() && self.portals.contains_key(msg.portal) {
            return Err(QueryError::command(
                sqlstate::DUPLICATE_CURSOR,
                format!("portal {} already exists", quote(msg.portal)),
            ));
        }
        if !self.portals.contains_key(msg.portal) && self.portals.len() >= MAX_PORTALS {
            return Err(QueryError::command(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "too many portals: a session holds at most {MAX_PORTALS}; close one \
                     (Close 'P') or Sync"
                ),
            ));
        }
        let columns = command.result_columns().map_or(0, |c| c.len());
        let formats = result_formats(&msg.result_formats, columns)?;
        self.portals.insert(msg.portal.to_string(), Portal { command, formats, ran: false });
        be::bind_complete(out);
        Ok(())
    }

    /// Describe: ParameterDescription (statements only), then
    /// RowDescription or NoData.
    pub fn describe(&self, msg: &Named<'_>, out: &mut BytesMut) -> Result<(), QueryError> {
        let (command, formats) = match msg.target {
            Target::Statement => {
                let command = self.statement(msg.name)?;
                be::parameter_description(out, &[]);
                // A statement's formats are not known before Bind: text.
                (command, &[][..])
            }
            Target::Portal => {
                let p = self.portal(msg.name)?;
                (&p.command, &p.formats[..])
            }
        };
        match command.result_columns() {
            Some(columns) => be::row_description_formats(out, columns, formats),
            None => be::no_data(out),
        }
        Ok(())
    }

    /// Close: forget the statement or portal if it exists, reply CloseComplete.
    pub fn close(&mut self, msg: &Named<'_>, out: &mut BytesMut) {
        match msg.target {
            Target::Statement => self.statements.remove(msg.name),
            Target::Portal => self.portals.remove(msg.name).map(|p| p.command),
        };
        be::close_complete(out);
    }

    /// The portal `name` for Execute, marked as run.
    pub fn take_for_execute(&mut self, name: &str) -> Result<Portal, QueryError> {
        let portal = self.portals.get_mut(name).ok_or_else(|| missing(Target::Portal, name))?;
        if portal.ran {
            return Err(QueryError::command(
                sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("portal {} cannot be run again: it already ran", quote(name)),
            ));
        }
        portal.ran = true;
        Ok(portal.clone())
    }

    /// The implicit transaction ended (Sync, or a simple Query): portals go.
    pub fn end_transaction(&mut self) {
        self.portals.clear();
    }

    /// A simple Query replaces the unnamed statement, as in PostgreSQL.
    pub fn drop_unnamed_statement(&mut self) {
        self.statements.remove("");
    }

    fn statement(&self, name: &str) -> Result<&Command, QueryError> {
        self.statements.get(name).ok_or_else(|| missing(Target::Statement, name))
    }

    fn portal(&self, name: &str) -> Result<&Portal, QueryError> {
        self.portals.get(name).ok_or_else(|| missing(Target::Portal, name))
    }
}

fn missing(target: Target, name: &str) -> QueryError {
    let code = match target {
        Target::Statement => sqlstate::INVALID_SQL_STATEMENT_NAME,
        Target::Portal => sqlstate::INVALID_CURSOR_NAME,
    };
    let name = if name.is_empty() { "(unnamed)".to_string() } else { quote(name).to_string() };
    QueryError::command(code, format!("{} {name} does not exist", target.noun()))
}

/// One format code per result column from Bind's list (PostgreSQL's rules).
fn result_formats(codes: &[i16], columns: usize) -> Result<Vec<i16>, QueryError> {
    if let Some(bad) = codes.iter().find(|&&c| c != 0 && c != 1) {
        return Err(QueryError::command(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!("unsupported result format code {bad}: expected 0 (text) or 1 (binary)"),
        ));
    }
    match codes.len() {
        0 => Ok(vec![0; columns]),
        1 => Ok(vec![codes[0]; columns]),
        n if n == columns => Ok(codes.to_vec()),
        n => Err(QueryError::command(
            sqlstate::PROTOCOL_VIOLATION,
            format!(
                "bind message has {n} result formats but the command returns {columns} columns"
            ),
        )),
    }
}

#[cfg(test)]
mod tests;
