//! `infersight tokens`: the API tokens of `serve`, in the tokens file of `[auth] tokens_file`
//! (or `--file`). `create` prints the new token once (on stdout, alone, so a script can capture
//! it) and stores only its hash; `list` shows names, roles, tenants and expiry, never a secret;
//! `revoke` removes one. A running `serve` picks up every change within a second (or at SIGHUP).
//! Each change, and each refused one, is a line of the store's access audit.

use std::path::PathBuf;

use infersight_model::time::{now_ns, parse_duration_ns, parse_time};
use infersight_server::auth::{Role, TokenFile};

use crate::args::Common;
use crate::exit::CliError;
use crate::output::{self, OutputFormat};

#[derive(Debug, clap::Args)]
pub struct TokensArgs {
    #[command(flatten)]
    pub common: Common,
    /// The tokens file [default: the configuration's auth.tokens_file].
    #[arg(long, global = true)]
    pub file: Option<PathBuf>,
    #[command(subcommand)]
    pub action: TokensAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum TokensAction {
    /// Create a token and print it (the only time it is shown).
    Create {
        /// Its name, shown in logs and the access audit (letters, digits, `.`, `_`, `-`).
        #[arg(long)]
        name: String,
        /// ingest (pushes telemetry only), viewer, analyst, operator or admin.
        #[arg(long)]
        role: String,
        /// A tenant the token is bound to (repeatable).
        #[arg(long = "tenant")]
        tenants: Vec<String>,
        /// Lifetime (`30d`, `12h`) or an RFC 3339 time; never expires without it.
        #[arg(long)]
        expires: Option<String>,
    },
    /// List the tokens: name, role, tenants, created, expires, state (never a secret).
    List {
        #[arg(long, value_enum, default_value = "table")]
        format: OutputFormat,
    },
    /// Remove a token; it is refused from the next reload of the file on.
    Revoke { name: String },
}

pub fn run(args: TokensArgs) -> Result<i32, CliError> {
    let config = args.common.resolve()?;
    let path = match args.file {
        Some(path) => path,
        None if !config.auth.tokens_file.is_empty() => PathBuf::from(&config.auth.tokens_file),
        None => {
            return Err(CliError::usage(
                "no tokens file: set [auth] tokens_file in the configuration, or pass --file",
            ));
        }
    };
    let mut file = TokenFile::read(&path).map_err(|e| CliError::usage(e.to_string()))?;
    let now = now_ns();
    match args.action {
        TokensAction::Create {
            name,
            role,
            tenants,
            expires,
        } => {
            let created = create(&mut file, &path, &name, &role, tenants, expires, now);
            audit_change(&config, &path, &name, "created", &created);
            let (token, role) = created?;
            eprintln!(
                "infersight: token `{name}` ({role}) added to {}; it is shown only now:",
                path.display()
            );
            output::emit(&format!("{token}\n"));
        }
        TokensAction::List { format } => output::emit(&list(&file, format, now)?),
        TokensAction::Revoke { name } => {
            let revoked = file
                .revoke(&name)
                .map_err(|e| CliError::usage(e.to_string()))
                .and_then(|_revoked| {
                    file.write(&path)
                        .map_err(|e| CliError::failed(e.to_string()))
                });
            audit_change(&config, &path, &name, "revoked", &revoked);
            revoked?;
            eprintln!("infersight: token `{name}` revoked in {}", path.display());
        }
    }
    Ok(0)
}

/// Adds the token to `file` and writes it: the token and its role.
fn create(
    file: &mut TokenFile,
    path: &std::path::Path,
    name: &str,
    role: &str,
    tenants: Vec<String>,
    expires: Option<String>,
    now: i64,
) -> Result<(String, Role), CliError> {
    let role = Role::parse(role).map_err(|e| CliError::usage(format!("--role: {e}")))?;
    let expires_ns = expires
        .as_deref()
        .map(|text| expiry(text, now))
        .transpose()?;
    let token = file
        .create(name, role, tenants, expires_ns, now)
        .map_err(|e| CliError::usage(e.to_string()))?;
    file.write(path)
        .map_err(|e| CliError::failed(e.to_string()))?;
    Ok((token, role))
}

/// A token change (or a refused one) as a line of the access audit of the configured store
/// (`surface: config`, the OS user as actor), never the token itself: where the audit of the
/// servers using this tokens file is. Before that store exists there is no audit to write to,
/// and stderr says so.
fn audit_change<T>(
    config: &crate::config::Config,
    path: &std::path::Path,
    name: &str,
    done: &str,
    result: &Result<T, CliError>,
) {
    let data_dir = &config.store.data_dir;
    if !data_dir.is_dir() {
        eprintln!(
            "infersight: no store at {} yet: this token change is in no access audit",
            data_dir.display()
        );
        return;
    }
    let audit = crate::wiring::access_audit(config);
    let (what, outcome) = match result {
        Ok(_) => (
            format!("token `{name}` {done} in {}", path.display()),
            Ok(()),
        ),
        Err(error) => (
            format!("token `{name}` not {done}: {}", error.message),
            Err(match error.code {
                2 => infersight_model::ErrorKind::BadRequest,
                _ => infersight_model::ErrorKind::Internal,
            }),
        ),
    };
    audit.record_change(what, outcome);
}

/// `--expires`: a lifetime from now, or a time; in the future either way.
fn expiry(text: &str, now: i64) -> Result<i64, CliError> {
    let at = match parse_duration_ns(text) {
        Some(lifetime) => now.saturating_add(lifetime),
        None => parse_time(text, now).map_err(|e| {
            CliError::usage(format!("--expires: {e} (or a lifetime like 30d, 12h)"))
        })?,
    };
    if at <= now {
        return Err(CliError::usage(format!(
            "--expires: `{text}` is not in the future"
        )));
    }
    Ok(at)
}

fn list(file: &TokenFile, format: OutputFormat, now: i64) -> Result<String, CliError> {
    let header = ["name", "role", "tenants", "created", "expires", "state"];
    let rows: Vec<Vec<String>> = file
        .tokens
        .iter()
        .map(|entry| {
            let expired = entry
                .expires
                .as_deref()
                .and_then(|t| parse_time(t, now).ok())
                .is_some_and(|at| at <= now);
            vec![
                entry.name.clone(),
                entry.role.to_string(),
                entry.tenants.join(","),
                entry.created.clone(),
                entry.expires.clone().unwrap_or_else(|| "never".to_string()),
                if expired { "expired" } else { "active" }.to_string(),
            ]
        })
        .collect();
    match format {
        OutputFormat::Table => Ok(output::fit_table(Some(&header[..]), &rows)),
        OutputFormat::Csv => output::csv(&header, &rows),
        OutputFormat::Json => {
            let tokens: Vec<serde_json::Value> = file
                .tokens
                .iter()
                .zip(&rows)
                .map(|(entry, row)| {
                    serde_json::json!({
                        "name": entry.name,
                        "role": entry.role,
                        "tenants": entry.tenants,
                        "created": entry.created,
                        "expires": entry.expires,
                        "state": row[5],
                    })
                })
                .collect();
            Ok(format!(
                "{}\n",
                output::json_pretty(&serde_json::json!({ "tokens": tokens }))?
            ))
        }
    }
}
