//! JWT authentication, shared by the page service (`pg_auth_type = "jwt"`)
//! and the HTTP API (`http_auth_type = "jwt"`).
//!
//! Page service clients send the token as their password, HTTP clients as
//! `Authorization: Bearer <token>`. Tokens are EdDSA (Ed25519) signed and
//! checked against the public key (PEM) named by
//! `auth_validation_public_key_path`; `exp` and `nbf` are enforced when present.
//!
//! Claims, as Neon's: `{"scope": "tenant", "tenant_id": "<hex>"}` grants access
//! to that one tenant; `{"scope": "pageserverapi"}` to every tenant and to the
//! management of the pageserver; any other scope is refused by [`JwtAuth::decode`].
//! [`check_permission`] decides access to one tenant's data,
//! [`check_management_permission`] access to what is not one tenant's (the
//! tenant list, creating, deleting, attaching and detaching tenants, the IO
//! engine, testing routes).
//!
//! Errors: [`JwtAuth::decode`] fails for a token that proves nothing (HTTP
//! 401), the `check_*` functions for a valid token that does not grant the
//! access (HTTP 403). Messages say which.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use utils::id::TenantId;
use utils::quote::quote;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthError(pub String);

/// The claims the page service looks at.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Claims {
    /// `tenant` or `pageserverapi` are accepted (other Neon scopes are not).
    pub scope: String,
    #[serde(default)]
    pub tenant_id: Option<TenantId>,
    /// Expiry. The JWT library checks it only when it is a number and
    /// ignores it otherwise; RFC 7519 says it must be a NumericDate, so any
    /// other present value (a string, `null`) makes the token invalid here.
    #[serde(default, deserialize_with = "numeric_date")]
    pub exp: Option<f64>,
    /// Not before: same rule as `exp`.
    #[serde(default, deserialize_with = "numeric_date")]
    pub nbf: Option<f64>,
}

/// A present registered date claim must be a JSON number (RFC 7519 §2).
fn numeric_date<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    match value.as_f64() {
        Some(seconds) => Ok(Some(seconds)),
        None => Err(serde::de::Error::custom(format!(
            "a date claim must be a NumericDate (seconds since 1970), not {}",
            quote(&value.to_string())
        ))),
    }
}

pub const SCOPE_TENANT: &str = "tenant";
pub const SCOPE_PAGESERVER_API: &str = "pageserverapi";

/// A validator for tokens signed by one key.
pub struct JwtAuth {
    key: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for JwtAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtAuth(EdDSA)")
    }
}

impl JwtAuth {
    /// Loads an Ed25519 public key in PEM form (`-----BEGIN PUBLIC KEY-----`).
    pub fn from_pem(pem: &[u8]) -> anyhow::Result<JwtAuth> {
        let key = DecodingKey::from_ed_pem(pem).context("not an Ed25519 public key in PEM form")?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        // Neon's tokens carry no registered claims; `exp` is still checked if present.
        validation.required_spec_claims = HashSet::new();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.leeway = 0;
        Ok(JwtAuth { key, validation })
    }

    pub fn from_key_path(path: &Path) -> anyhow::Result<JwtAuth> {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read JWT public key {}", path.display()))?;
        JwtAuth::from_pem(&pem).with_context(|| format!("JWT public key {}", path.display()))
    }

    /// Checks the token ([`JwtAuth::verify`]) and that its scope is one of
    /// ours; returns the claims.
    pub fn decode(&self, token: &str) -> Result<Claims, AuthError> {
        let claims = self.verify(token)?;
        match claims.scope.as_str() {
            SCOPE_TENANT | SCOPE_PAGESERVER_API => Ok(claims),
            other => Err(ineligible(other)),
        }
    }

    /// Checks the signature, `exp` and `nbf`, and that a `tenant` scope names
    /// its tenant; any other scope passes (the `check_*` functions refuse it,
    /// so the HTTP API answers a signed token of a foreign scope with 403).
    pub fn verify(&self, token: &str) -> Result<Claims, AuthError> {
        let data = jsonwebtoken::decode::<Claims>(token.trim(), &self.key, &self.validation)
            .map_err(|e| AuthError(format!("invalid JWT: {}", describe(&e))))?;
        let claims = data.claims;
        if claims.scope == SCOPE_TENANT && claims.tenant_id.is_none() {
            return Err(AuthError("invalid JWT: scope 'tenant' without a tenant_id".to_string()));
        }
        Ok(claims)
    }
}

/// Why `jsonwebtoken` refused a token, in words an operator can act on.
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::InvalidSignature => {
            "bad signature (not signed by the key of auth_validation_public_key_path)".to_string()
        }
        ErrorKind::ExpiredSignature => "expired (its exp claim is in the past)".to_string(),
        ErrorKind::ImmatureSignature => {
            "not valid yet (its nbf claim is in the future)".to_string()
        }
        ErrorKind::InvalidAlgorithm => "not signed with EdDSA".to_string(),
        ErrorKind::InvalidToken | ErrorKind::Base64(_) | ErrorKind::Utf8(_) => {
            "malformed (not three base64url parts)".to_string()
        }
        _ => e.to_string(),
    }
}

fn ineligible(scope: &str) -> AuthError {
    AuthError(format!(
        "JWT scope {} is not accepted (only '{SCOPE_TENANT}' and '{SCOPE_PAGESERVER_API}')",
        quote(scope)
    ))
}

/// May the holder of `claims` access `tenant_id`?
pub fn check_permission(claims: &Claims, tenant_id: TenantId) -> Result<(), AuthError> {
    match claims.scope.as_str() {
        SCOPE_PAGESERVER_API => Ok(()),
        SCOPE_TENANT if claims.tenant_id == Some(tenant_id) => Ok(()),
        SCOPE_TENANT => Err(AuthError(format!(
            "tenant id mismatch: the token grants access to tenant {}, not {tenant_id}",
            claims.tenant_id.map(|t| t.to_string()).unwrap_or_default()
        ))),
        other => Err(ineligible(other)),
    }
}

/// May the holder of `claims` use what is not one tenant's (the management
/// API)? Only with scope `pageserverapi`.
pub fn check_management_permission(claims: &Claims) -> Result<(), AuthError> {
    match claims.scope.as_str() {
        SCOPE_PAGESERVER_API => Ok(()),
        SCOPE_TENANT => Err(AuthError(format!(
            "the token grants access to tenant {} only; this needs scope '{SCOPE_PAGESERVER_API}'",
            claims.tenant_id.map(|t| t.to_string()).unwrap_or_default()
        ))),
        other => Err(ineligible(other)),
    }
}

/// Test-only Ed25519 key pairs (the integration tests use the same files)
/// and token signing, for this module's tests and the HTTP API's.
#[cfg(test)]
pub(crate) mod test_keys {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};

    pub const PRIVATE_A: &str = include_str!("../tests/data/jwt_a_private.pem");
    pub const PUBLIC_A: &str = include_str!("../tests/data/jwt_a_public.pem");
    pub const PRIVATE_B: &str = include_str!("../tests/data/jwt_b_private.pem");

    /// A token of `claims` signed with `private`.
    pub fn sign(private: &str, claims: serde_json::Value) -> String {
        let key = EncodingKey::from_ed_pem(private.as_bytes()).unwrap();
        jsonwebtoken::encode(&Header::new(Algorithm::EdDSA), &claims, &key).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::test_keys::{sign, PRIVATE_A, PRIVATE_B, PUBLIC_A};
    use super::*;

    #[test]
    fn tenant_scope_is_checked_against_the_named_tenant() {
        let auth = JwtAuth::from_pem(PUBLIC_A.as_bytes()).unwrap();
        let t1 = TenantId::generate();
        let t2 = TenantId::generate();
        let token =
            sign(PRIVATE_A, serde_json::json!({"scope": "tenant", "tenant_id": t1.to_string()}));
        let claims = auth.decode(&token).unwrap();
        assert_eq!(check_permission(&claims, t1), Ok(()));
        let err = check_permission(&claims, t2).unwrap_err();
        assert!(err.0.contains("mismatch"), "{err}");

        let token = sign(PRIVATE_A, serde_json::json!({"scope": "pageserverapi"}));
        let claims = auth.decode(&token).unwrap();
        assert_eq!(check_permission(&claims, t2), Ok(()));
    }

    #[test]
    fn management_needs_the_pageserverapi_scope() {
        let auth = JwtAuth::from_pem(PUBLIC_A.as_bytes()).unwrap();
        let t = TenantId::generate();
        let token =
            sign(PRIVATE_A, serde_json::json!({"scope": "tenant", "tenant_id": t.to_string()}));
        let err = check_management_permission(&auth.decode(&token).unwrap()).unwrap_err();
        assert!(err.0.contains(&t.to_string()) && err.0.contains("'pageserverapi'"), "{err}");
        let token = sign(PRIVATE_A, serde_json::json!({"scope": "pageserverapi"}));
        assert_eq!(check_management_permission(&auth.decode(&token).unwrap()), Ok(()));
    }

    #[test]
    fn bad_tokens_are_rejected() {
        let auth = JwtAuth::from_pem(PUBLIC_A.as_bytes()).unwrap();
        let t = TenantId::generate().to_string();
        // Signed by another key.
        let token = sign(PRIVATE_B, serde_json::json!({"scope": "tenant", "tenant_id": t}));
        let err = auth.decode(&token).unwrap_err().0;
        assert!(err.starts_with("invalid JWT: bad signature"), "{err}");
        // Expired.
        let token =
            sign(PRIVATE_A, serde_json::json!({"scope": "tenant", "tenant_id": t, "exp": 1000}));
        assert!(auth.decode(&token).unwrap_err().0.contains("expired"));
        // Ineligible scope, tenant scope without tenant, garbage.
        let token = sign(PRIVATE_A, serde_json::json!({"scope": "safekeeperdata"}));
        assert!(auth.decode(&token).unwrap_err().0.contains("not accepted"));
        let claims = auth.verify(&token).unwrap();
        assert!(check_permission(&claims, TenantId::generate())
            .unwrap_err()
            .0
            .contains("not accepted"));
        assert!(check_management_permission(&claims).unwrap_err().0.contains("not accepted"));
        let token = sign(PRIVATE_A, serde_json::json!({"scope": "tenant"}));
        assert!(auth.verify(&token).unwrap_err().0.contains("without a tenant_id"));
        assert!(auth.decode("not.a.jwt").unwrap_err().0.contains("malformed"));
        // Tampered payload.
        let token = sign(PRIVATE_A, serde_json::json!({"scope": "tenant", "tenant_id": t}));
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = sign(PRIVATE_B, serde_json::json!({"scope": "pageserverapi"}));
        parts[1] = forged.split('.').nth(1).unwrap();
        assert!(auth.decode(&parts.join(".")).is_err());
    }

    #[test]
    fn date_claims_must_be_numeric_dates() {
        let auth = JwtAuth::from_pem(PUBLIC_A.as_bytes()).unwrap();
        let t = TenantId::generate().to_string();
        for exp in [serde_json::json!("tomorrow"), serde_json::json!(null), serde_json::json!([1])]
        {
            let claims = serde_json::json!({"scope": "tenant", "tenant_id": t, "exp": exp});
            let err = auth.decode(&sign(PRIVATE_A, claims)).unwrap_err();
            assert!(err.0.contains("NumericDate"), "exp {exp}: {err}");
        }
        let claims = serde_json::json!({"scope": "pageserverapi", "nbf": "now"});
        assert!(auth.decode(&sign(PRIVATE_A, claims)).unwrap_err().0.contains("NumericDate"));
        let future = 4_000_000_000u64;
        let claims = serde_json::json!({"scope": "pageserverapi", "nbf": future});
        assert!(auth.decode(&sign(PRIVATE_A, claims)).is_err(), "not valid before nbf");
        let claims = serde_json::json!({"scope": "pageserverapi", "exp": future});
        assert_eq!(auth.decode(&sign(PRIVATE_A, claims)).unwrap().exp, Some(future as f64));
    }

    #[test]
    fn key_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        let err = JwtAuth::from_key_path(&path).unwrap_err();
        assert!(format!("{err:#}").contains("key.pem"));
        std::fs::write(&path, "not a key").unwrap();
        let err = JwtAuth::from_key_path(&path).unwrap_err();
        assert!(format!("{err:#}").contains("key.pem"), "{err:#}");
        std::fs::write(&path, PUBLIC_A).unwrap();
        JwtAuth::from_key_path(&path).unwrap();
    }
}
