//! Configuration: the model (what mcpmux runs with, validated) and loading it from a TOML file or
//! from the `mcpServers` JSON that Claude Desktop, Cursor and VS Code already use.

mod audit;
mod load;
mod model;
mod policy;

pub use audit::{AuditConfig, DEFAULT_SECRET_KEYS, Durability, Redaction, state_dir};
pub use load::{ConfigError, default_path, load};
pub use model::{
    CatalogConfig, Config, DEFAULT_INHERITED_ENV, Isolation, ServerConfig, UpstreamConfig,
};
pub use policy::Policy;
