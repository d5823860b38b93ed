//! The log subscriber: its level comes from `DATAPLANE_LOG` when set (an `EnvFilter`
//! directive such as `info` or `dataplane=debug`), else from the loaded configuration's
//! `log_level` (and `debug: true`), else `warn`.

use crate::args::LogFormat;
use std::io::IsTerminal;
use std::sync::OnceLock;
use tracing_subscriber::{EnvFilter, Layer, Registry, layer::SubscriberExt, reload};

/// The environment variable that overrides the configuration's level.
pub const ENV: &str = "DATAPLANE_LOG";

static LEVEL: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

fn from_env() -> Option<EnvFilter> {
    std::env::var_os(ENV)?;
    match EnvFilter::try_from_env(ENV) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("warning: {ENV} is not a valid filter ({e}); using the default");
            None
        }
    }
}

/// Installs the subscriber on stderr in `format`.
pub fn init(format: LogFormat) {
    let (filter, handle) = reload::Layer::new(from_env().unwrap_or_else(|| EnvFilter::new("warn")));
    let output = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
    };
    let subscriber = tracing_subscriber::registry().with(filter).with(output);
    if tracing::subscriber::set_global_default(subscriber).is_ok() {
        let _ = LEVEL.set(handle);
    }
}

/// Applies `config`'s `log_level` unless the environment variable set the level.
pub fn apply_config(config: &dataplane::config::Config) {
    if std::env::var_os(ENV).is_some() {
        return;
    }
    let level = dataplane::config::tracing_level(&config.log_level, config.debug);
    if let Some(h) = LEVEL.get() {
        let _ = h.reload(EnvFilter::new(level));
    }
}
