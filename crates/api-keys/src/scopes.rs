//! What a key may do (`scopes` in `--api-keys-file`): `inference` (the API routes), `admin`
//! (loading and unloading models and LoRA adapters) and `router` (vouching, in the
//! `x-pagoda-router-key` header, that a request's `kv_transfer_params` come from the router).
//! A file key without `scopes` has `inference`; the one `--api-key` has all (the operator's).

/// A key's scopes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scopes {
    pub inference: bool,
    pub admin: bool,
    pub router: bool,
}

/// The names a keys file may give.
pub const SCOPE_NAMES: [&str; 3] = ["inference", "admin", "router"];

impl Scopes {
    pub const ALL: Self = Self {
        inference: true,
        admin: true,
        router: true,
    };

    pub const INFERENCE: Self = Self {
        inference: true,
        admin: false,
        router: false,
    };

    /// From a keys file entry's names; `Err` names the unknown one.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, String> {
        let mut s = Self::default();
        for n in names {
            match n.as_ref() {
                "inference" => s.inference = true,
                "admin" => s.admin = true,
                "router" => s.router = true,
                other => return Err(other.to_owned()),
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknown_ones_are_named() {
        assert_eq!(
            Scopes::parse(&["admin"]),
            Ok(Scopes {
                inference: false,
                admin: true,
                router: false,
            })
        );
        assert_eq!(Scopes::parse(&["root"]), Err("root".to_owned()));
        assert_eq!(Scopes::parse::<&str>(&[]), Ok(Scopes::default()));
    }
}
