//! The config file, composed: each crate owns and parses its own sections (`[server]`,
//! `[[tools]]`, `[[resources]]` and `[[prompts]]` belong to `toolyard`, `[gateway]` and
//! `[[sources]]` to `toolyard-gateway`, `[connectors]` to `toolyard-connectors`, `[agent]` and
//! `[[clients]]` to `toolyard-agent`), and only the binary knows the whole file. A key no crate
//! owns is refused, naming the sections that exist.

use std::path::Path;
use toolyard::{Config, ConfigError};
#[cfg(feature = "agent")]
use toolyard_agent::config::AgentConfig;
#[cfg(feature = "connectors")]
use toolyard_connectors::ConnectorsConfig;
use toolyard_gateway::GatewayConfig;
#[cfg(feature = "nats")]
use toolyard_nats::NatsConfig;
#[cfg(feature = "otel")]
use toolyard_otel::TelemetryConfig;

/// `[telemetry]` with the `otel` feature; without it the section is nobody's, so refused.
#[cfg(feature = "otel")]
pub(crate) type TelemetryFile = TelemetryConfig;
/// `[telemetry]` with the `otel` feature; without it the section is nobody's, so refused.
#[cfg(not(feature = "otel"))]
#[derive(Debug, Default)]
pub(crate) struct TelemetryFile;

/// Every section of a `toolyard serve --config` file.
#[derive(Debug, Default)]
pub(crate) struct ConfigFile {
    /// The server's sections.
    pub(crate) server: Config,
    /// The gateway's sections.
    pub(crate) gateway: GatewayConfig,
    /// `[nats]`.
    #[cfg(feature = "nats")]
    pub(crate) nats: NatsConfig,
    /// `[telemetry]`.
    pub(crate) telemetry: TelemetryFile,
    /// The built-in connectors' sections.
    #[cfg(feature = "connectors")]
    pub(crate) connectors: ConnectorsConfig,
    /// The agent's sections (`[agent]`, `[[clients]]`).
    #[cfg(feature = "agent")]
    pub(crate) agent: AgentConfig,
}

impl ConfigFile {
    /// Reads and parses a file.
    pub(crate) fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = Config::read(path)?;
        Self::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    /// Parses TOML text.
    pub(crate) fn parse(text: &str) -> Result<ConfigFile, String> {
        let mut plugin_sections: Vec<&str> = GatewayConfig::SECTIONS.to_vec();
        #[cfg(feature = "nats")]
        plugin_sections.extend(NatsConfig::SECTIONS);
        #[cfg(feature = "otel")]
        plugin_sections.extend(TelemetryConfig::SECTIONS);
        #[cfg(feature = "connectors")]
        plugin_sections.extend(ConnectorsConfig::SECTIONS);
        #[cfg(feature = "agent")]
        plugin_sections.extend(AgentConfig::SECTIONS);
        Ok(ConfigFile {
            server: Config::parse_with(text, &plugin_sections)?,
            gateway: GatewayConfig::parse(text)?,
            #[cfg(feature = "nats")]
            nats: NatsConfig::parse(text)?,
            #[cfg(feature = "otel")]
            telemetry: TelemetryConfig::parse(text)?,
            #[cfg(not(feature = "otel"))]
            telemetry: TelemetryFile,
            #[cfg(feature = "connectors")]
            connectors: ConnectorsConfig::parse(text)?,
            #[cfg(feature = "agent")]
            agent: AgentConfig::parse(text)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crate_reads_its_own_sections_of_one_file() {
        let file = ConfigFile::parse(
            r#"
            [server]
            name = "x"
            [gateway]
            separator = "."
            [[sources]]
            name = "time"
            command = "uvx"
            "#,
        )
        .unwrap();
        assert_eq!(file.server.server.name.as_deref(), Some("x"));
        assert_eq!(file.gateway.gateway.separator, ".");
        assert_eq!(file.gateway.sources[0].name, "time");
    }

    #[cfg(feature = "agent")]
    #[test]
    fn the_agent_reads_its_own_sections_and_the_clients_it_calls() {
        let file = ConfigFile::parse(
            "[agent]\nmodel = \"m\"\ntools = [\"demo/*\"]\n[[clients]]\nname = \"demo\"\ncommand = \"toolyard\"\n",
        )
        .unwrap();
        assert_eq!(file.agent.agent.model.as_deref(), Some("m"));
        assert_eq!(file.agent.clients[0].name(), "demo");
        let err = ConfigFile::parse("[agent]\nmdoel = \"m\"\n").unwrap_err();
        assert!(err.contains("mdoel"), "{err}");
    }

    #[cfg(feature = "connectors")]
    #[test]
    fn the_connectors_read_their_own_sections() {
        let file =
            ConfigFile::parse("[connectors.filesystem]\nroots = [\"/srv\"]\nread_only = true\n")
                .unwrap();
        let fs = file.connectors.connectors.filesystem.unwrap();
        assert!(fs.read_only);
        let err = ConfigFile::parse("[connectors.filesystem]\nroot = [\"/srv\"]\n").unwrap_err();
        assert!(err.contains("root"), "{err}");
    }

    #[test]
    fn a_key_no_crate_owns_is_refused_and_so_is_a_typo_inside_a_section() {
        let err = ConfigFile::parse("[sever]\nname = \"x\"\n").unwrap_err();
        assert!(err.contains("unknown section `sever`"), "{err}");
        let err = ConfigFile::parse("[gateway]\nseperator = \".\"\n").unwrap_err();
        assert!(err.contains("seperator"), "{err}");
        let err = ConfigFile::parse("[server]\nnmae = \"x\"\n").unwrap_err();
        assert!(err.contains("nmae"), "{err}");
    }
}
