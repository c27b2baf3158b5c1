//! An identity provider for tests of `[auth.oidc]`: a fresh P-256 key (rcgen), its JWKS, and
//! ES256 JWTs signed with it (ring) for any claims.

use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
use serde_json::{Value, json};

/// One signing key of a test provider.
pub struct TestIssuer {
    pub kid: String,
    pair: EcdsaKeyPair,
    point: Vec<u8>,
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

impl TestIssuer {
    pub fn new(kid: &str) -> TestIssuer {
        let key = rcgen::KeyPair::generate().unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
            &SystemRandom::new(),
        )
        .unwrap();
        TestIssuer {
            kid: kid.to_string(),
            pair,
            point: key.public_key_raw().to_vec(),
        }
    }

    /// The public key as a JWK (`kty: EC`, `crv: P-256`).
    pub fn jwk(&self) -> Value {
        json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "use": "sig", "alg": "ES256",
               "x": b64(&self.point[1..33]), "y": b64(&self.point[33..])})
    }

    /// A JWKS document holding `issuers`' keys.
    pub fn jwks(issuers: &[&TestIssuer]) -> String {
        json!({"keys": issuers.iter().map(|i| i.jwk()).collect::<Vec<_>>()}).to_string()
    }

    /// A JWT of `claims` signed with this key; `header` adds to (or overrides) `alg`/`kid`.
    pub fn sign(&self, header: Value, claims: &Value) -> String {
        let mut full = json!({"alg": "ES256", "kid": self.kid, "typ": "JWT"});
        if let (Some(full), Some(extra)) = (full.as_object_mut(), header.as_object()) {
            full.extend(extra.clone());
        }
        let signed = format!(
            "{}.{}",
            b64(full.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        format!("{signed}.{}", b64(&self.sign_raw(signed.as_bytes())))
    }

    /// The ES256 signature (r ‖ s) of `message`.
    pub fn sign_raw(&self, message: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .unwrap()
            .as_ref()
            .to_vec()
    }
}
