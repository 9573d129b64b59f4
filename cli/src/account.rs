//! `lanes login` and `lanes logout`: a password once, then an API token named after this host.

use crate::config::{self, Config};
use crate::error::{CliError, Result};
use crate::output;
use crate::Common;
use clap::Args;
use lanes_types::account::{
    CreatedToken, DeviceOutcome, DevicePoll, NewToken, RedeemTerminalCode, User,
};
use std::io::{BufRead, IsTerminal, Write};

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The portal, e.g. http://gpu-portal:3000 [default: the one logged in to, or $LANES_URL].
    pub url: Option<String>,
    /// The username [default: asked, offering $USER].
    #[arg(long, short)]
    pub username: Option<String>,
    /// Sign in with a username and password (a local account, or the lab's LDAP account),
    /// even where the portal offers its sign-in provider.
    #[arg(long, conflicts_with = "code")]
    pub password: bool,
    /// Sign in with a one-time code from the portal's account page ("Sign in on a terminal").
    #[arg(long)]
    pub code: bool,
    #[command(flatten)]
    pub common: Common,
}

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown host".into())
}

/// Reads one line from the terminal after a prompt.
fn ask(prompt: &str) -> Result<String> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| CliError::usage(e.to_string()))?;
    Ok(line.trim().to_string())
}

pub async fn login(args: LoginArgs) -> Result<()> {
    let saved = config::load().ok().flatten();
    let url = args
        .url
        .or_else(|| std::env::var("LANES_URL").ok().filter(|v| !v.is_empty()))
        .or_else(|| saved.as_ref().map(|c| c.url.clone()))
        .ok_or_else(|| CliError::usage("which portal? `lanes login http://HOST:PORT`"))?;
    // Whether the portal answers, before anyone types anything for it.
    let anonymous = config::anonymous(&url)?;
    anonymous.health().await?;
    let methods = anonymous.auth_methods().await.unwrap_or_default();
    let token_name = format!("lanes CLI on {}", host_name());
    // A username given is a password sign-in (local or LDAP accounts).
    let password = args.password || args.username.is_some();
    let (user, token) = match (&methods.oidc, password, args.code) {
        (_, false, true) => code_sign_in(&anonymous, token_name).await?,
        (Some(oidc), false, false) if oidc.device => {
            device_sign_in(&anonymous, &oidc.name, token_name).await?
        }
        (Some(_), false, false) => code_sign_in(&anonymous, token_name).await?,
        _ => password_sign_in(&anonymous, args.username, token_name).await?,
    };
    // A login replacing another: the old token is no use any more.
    if let Some(old) = saved.filter(|c| config::normalize_url(&c.url) == anonymous.base()) {
        if let Some(id) = old.token_id {
            let _ = config::client_for(&old.url, &old.token)?
                .revoke_token(id)
                .await;
        }
    }
    let path = config::save(&Config {
        url: anonymous.base().to_string(),
        token: token.secret.clone(),
        token_id: Some(token.token.id),
        username: Some(user.username.clone()),
    })?;
    if args.common.json {
        output::json(&user);
    } else {
        output::say(&format!(
            "Logged in to {} as {} ({}); token {:?} kept in {}",
            anonymous.base(),
            user.username,
            user.role,
            token.token.name,
            path.display()
        ));
    }
    Ok(())
}

/// A username and password (a local or LDAP account): a session once, then a token.
async fn password_sign_in(
    anonymous: &lanes_client::Client,
    username: Option<String>,
    token_name: String,
) -> Result<(User, CreatedToken)> {
    if !std::io::stdin().is_terminal() {
        return Err(CliError::usage(
            "lanes login asks for a password and needs a terminal; in scripts, create a token on \
             the account page and set LANES_URL and LANES_TOKEN",
        ));
    }
    let username = match username {
        Some(name) => name,
        None => {
            let offered = std::env::var("USER").unwrap_or_default();
            let prompt = if offered.is_empty() {
                "Username: ".to_string()
            } else {
                format!("Username [{offered}]: ")
            };
            let typed = ask(&prompt)?;
            if typed.is_empty() {
                offered
            } else {
                typed
            }
        }
    };
    if username.is_empty() {
        return Err(CliError::usage("a username is needed"));
    }
    let password = rpassword::prompt_password("Password: ")
        .map_err(|e| CliError::usage(format!("cannot read the password: {e}")))?;
    let (session, user) = anonymous.login(&username, &password).await?;
    let token = session.create_token(&NewToken { name: token_name }).await?;
    // The session was only the way to the token.
    let _ = session.logout().await;
    Ok((user, token))
}

/// The provider's device grant: a code to confirm in any browser, then a token. No password
/// is typed here.
async fn device_sign_in(
    anonymous: &lanes_client::Client,
    provider: &str,
    token_name: String,
) -> Result<(User, CreatedToken)> {
    let started = anonymous.start_device_sign_in().await?;
    let page = started
        .verification_uri_complete
        .clone()
        .unwrap_or_else(|| started.verification_uri.clone());
    output::say(&format!(
        "To sign in with {provider}, open {page}\nand confirm the code {} (valid {} min). Waiting…",
        started.user_code,
        started.expires_in.div_ceil(60)
    ));
    loop {
        let outcome = anonymous
            .poll_device_sign_in(&DevicePoll {
                handle: started.handle.clone(),
                token_name: token_name.clone(),
            })
            .await?;
        match outcome {
            DeviceOutcome::Pending => continue,
            DeviceOutcome::Done { user, token } => return Ok((user, token)),
        }
    }
}

/// A one-time code from the account page, then a token.
async fn code_sign_in(
    anonymous: &lanes_client::Client,
    token_name: String,
) -> Result<(User, CreatedToken)> {
    output::say(&format!(
        "Sign in at {}/account in a browser, press \"Show a code\" under \"Sign in on a terminal\", and type it here.",
        anonymous.base().trim_end_matches('/')
    ));
    let code = ask("Code: ")?;
    if code.is_empty() {
        return Err(CliError::usage("a code is needed"));
    }
    let signed_in = anonymous
        .sign_in_with_terminal_code(&RedeemTerminalCode { code, token_name })
        .await?;
    Ok((signed_in.user, signed_in.token))
}

pub async fn logout(common: Common) -> Result<()> {
    let Some(saved) = config::load()? else {
        return Err(CliError::usage("not logged in on this host"));
    };
    let revoked = match saved.token_id {
        Some(id) => config::client_for(&saved.url, &saved.token)?
            .revoke_token(id)
            .await
            .map(|()| true),
        None => Ok(false),
    };
    match revoked {
        Ok(_) => {}
        // Already revoked (or the account gone): forgetting it is all that is left to do.
        Err(e)
            if e.status()
                .is_some_and(|s| s.as_u16() == 401 || s.as_u16() == 404) => {}
        Err(e) => return Err(e.into()),
    }
    config::remove()?;
    if common.json {
        output::json(&serde_json::json!({ "logged_out": saved.url }));
    } else {
        output::say(&format!(
            "Logged out of {}; the token is revoked",
            saved.url
        ));
    }
    Ok(())
}
