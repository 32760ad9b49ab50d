//! The `norma` command: `serve`, `token`, `migrate`, `openapi`, and the terminal client
//! (`chat`, `sessions`, `prompt`, `events`, `approve`, `deny`; see [`norma::cli`]).

use anyhow::Context;
use clap::{Parser, Subcommand};
use norma::app::{App, StopSignals};
use norma::auth::{JwtVerifier, TokenRequest, scopes};
use norma::config::{Overrides, Settings};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// mimalloc instead of glibc's malloc: the run path allocates from the tokio workers and the
/// store's threads at once, and glibc's arenas then contend on their locks. Measured with the
/// end-to-end benchmark (`benches/ROUNDS.md`, rounds of 2026-12-05): 10–15 % less
/// server CPU per run at 16 in flight. Built without transparent huge pages (`no_thp`): with
/// them an idle server's heap grew from 4 to 17 MiB resident, past the 16 MiB target.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "norma",
    version,
    about = "Norma Server: a multi-tenant agent server"
)]
struct Cli {
    /// Optional TOML configuration file.
    #[arg(long, global = true, env = "NORMA_CONFIG")]
    config: Option<PathBuf>,
    /// Overrides `data_dir`.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Overrides `database_url` (`postgres://…` or `sqlite://…`).
    #[arg(long, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve {
        /// Overrides `bind`.
        #[arg(long)]
        bind: Option<SocketAddr>,
        /// Allows development mode (no auth key configured) on a non-loopback address
        /// (the `dev` setting).
        #[arg(long)]
        dev: bool,
    },
    /// Print a signed HS256 token (development key or configured secret).
    Token {
        #[arg(long)]
        tenant: String,
        #[arg(long, default_value = "dev-user")]
        sub: String,
        /// Repeatable; defaults to every scope.
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Lifetime, e.g. `1h`, `30m`, `7d`.
        #[arg(long, default_value = "24h")]
        ttl: humantime::Duration,
    },
    /// Apply store migrations and exit.
    Migrate,
    /// Print the OpenAPI document.
    Openapi,
    #[command(flatten)]
    Client(norma::cli::ClientCommand),
}

fn main() -> anyhow::Result<()> {
    // The sandbox launcher must run before any runtime or thread starts: it restricts this
    // process (user/network namespace, Landlock, rlimits) and then execs the command.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .get(1)
        .is_some_and(|a| a == norma::sandbox::launcher::SUBCOMMAND)
    {
        norma::sandbox::launcher::main_from_args(args);
    }
    let cli = Cli::parse();
    if matches!(cli.command, Command::Serve { .. } | Command::Migrate) {
        // Before anything uses SQLite (see the function's doc).
        norma::store::sqlite::disable_memory_statistics();
    }
    let (bind, dev) = match &cli.command {
        Command::Serve { bind, dev } => (*bind, dev.then_some(true)),
        _ => (None, None),
    };
    let overrides = Overrides {
        bind,
        data_dir: cli.data_dir.clone(),
        database_url: cli.database_url.clone(),
        dev,
    };
    match cli.command {
        Command::Client(command) => {
            let runtime = runtime(None)?;
            let outcome = runtime.block_on(norma::cli::run(command));
            runtime.shutdown_background();
            if let Err(error) = outcome {
                eprintln!("error: {error}");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Openapi => {
            print!("{}", norma::api::openapi_json());
            Ok(())
        }
        Command::Token {
            tenant,
            sub,
            scopes: requested,
            ttl,
        } => {
            let settings = Settings::load(cli.config.as_deref(), &overrides)?;
            let verifier = JwtVerifier::from_settings(&settings.auth, &settings.data_dir)?;
            if !norma::ids::TenantId::is_well_formed(&tenant) {
                anyhow::bail!("tenant must be 1-128 characters of [A-Za-z0-9-_.:@]");
            }
            let scopes = if requested.is_empty() {
                scopes::ALL.iter().map(|s| s.to_string()).collect()
            } else {
                requested
            };
            let token = verifier.mint(&TokenRequest {
                tenant,
                subject: sub,
                scopes,
                ttl: ttl.into(),
            })?;
            println!("{token}");
            Ok(())
        }
        Command::Migrate => {
            let settings = Settings::load(cli.config.as_deref(), &overrides)?;
            let _telemetry = norma::telemetry::init(&settings.log);
            runtime(None)?.block_on(async {
                norma::store::connect(&settings.database_url(), &Default::default())
                    .await
                    .context("migration failed")?;
                tracing::info!("migrations applied");
                Ok(())
            })
        }
        Command::Serve { .. } => {
            let settings = Settings::load(cli.config.as_deref(), &overrides)?;
            settings.check_serving()?;
            let _telemetry = norma::telemetry::init(&settings.log);
            for name in norma::config::ignored_environment() {
                tracing::info!(variable = %name, "environment variable ignored (not a setting)");
            }
            let runtime = runtime(settings.worker_threads)?;
            let served = runtime.block_on(serve(settings));
            // Whatever is still blocked (a stuck blocking read) does not keep the process.
            runtime.shutdown_timeout(Duration::from_secs(1));
            served
        }
    }
}

/// Development mode: a token for tenant `dev` when stdout is a terminal; otherwise (stdout is
/// a log file, a pipe, a container log) only how to mint one, so no token lands in a log.
fn print_development_notice(app: &App, addr: SocketAddr) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    println!("Development mode: no auth key configured; using a generated key in the data dir.");
    if std::io::stdout().is_terminal() {
        let token = app.state().verifier.mint(&TokenRequest {
            tenant: "dev".into(),
            subject: "dev-user".into(),
            scopes: scopes::ALL.iter().map(|s| s.to_string()).collect(),
            ttl: Duration::from_secs(24 * 3600),
        })?;
        println!("Bearer token for tenant `dev` (valid 24 h):\n\n  {token}\n");
        println!(
            "Try: curl -H \"Authorization: Bearer $TOKEN\" -H 'Content-Type: application/json' -d '{{}}' http://{addr}/v1/sessions"
        );
    } else {
        println!(
            "Not printing a token (stdout is not a terminal). Mint one with: \
             norma token --tenant dev --data-dir {}",
            app.state().settings.data_dir.display()
        );
    }
    Ok(())
}

/// The async runtime, with `workers` worker threads (`None`: tokio's default, one per core or
/// `TOKIO_WORKER_THREADS`).
fn runtime(workers: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let development = settings.auth.is_development();
    let app = App::build(settings).await?;
    let addr = app.local_addr()?;
    tracing::info!(
        %addr,
        store = app.state().store.backend(),
        workers = tokio::runtime::Handle::current().metrics().num_workers(),
        "norma listening"
    );
    if let Some(metrics) = app.metrics_addr() {
        tracing::info!(%metrics, "metrics listening (GET /metrics)");
    }
    println!("Web console: {}", norma::console::url(addr));
    if development {
        print_development_notice(&app, addr)?;
    }
    // The first SIGTERM/SIGINT shuts down gracefully (runs hand off to other replicas); a
    // second one during that shutdown exits at once.
    let mut signals = StopSignals::new().context("cannot listen for SIGTERM/SIGINT")?;
    let (first, first_received) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        signals.recv().await;
        tracing::info!("stop signal received; shutting down gracefully");
        let _ = first.send(());
        signals.recv().await;
        tracing::warn!("second stop signal; exiting now");
        std::process::exit(130);
    });
    app.run_until(async move {
        let _ = first_received.await;
    })
    .await?;
    tracing::info!("norma stopped");
    Ok(())
}
