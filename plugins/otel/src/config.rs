//! The config file's `[telemetry]` section (the binary composes the file from each crate's
//! sections). Flags and the standard `OTEL_*` variables override it.

use crate::TelemetrySettings;
use serde::Deserialize;

/// `[telemetry]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// The OTLP base endpoint, e.g. `http://collector:4318` (HTTP) or
    /// `http://collector:4317` (gRPC).
    pub endpoint: Option<String>,
    /// `http/protobuf` or `grpc`; else `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP.
    pub protocol: Option<crate::OtlpProtocol>,
    /// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
    pub service_name: Option<String>,
    /// Serve `GET /metrics` (Prometheus text format) on the HTTP server.
    #[serde(default)]
    pub prometheus: bool,
    /// Export traces (default true).
    pub traces: Option<bool>,
    /// Export metrics (default true).
    pub metrics: Option<bool>,
    /// Export log records: the `tracing` events the log filter lets through (default true,
    /// as `OTEL_LOGS_EXPORTER` defaults to `otlp`).
    pub logs: Option<bool>,
    /// `[telemetry.capture]`: tool arguments and results on spans (off by default).
    #[serde(default)]
    pub capture: CaptureSection,
    /// The values of the secrets the whole config file refers to (`${VAR}`, `file:PATH`),
    /// never captured; read by [`TelemetryConfig::parse`].
    #[serde(skip)]
    config_secrets: SecretValues,
}

/// Secret values, printed as their number.
#[derive(Clone, Default)]
struct SecretValues(Vec<String>);

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} secrets>", self.0.len())
    }
}

/// `[telemetry.capture]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureSection {
    /// `gen_ai.tool.call.arguments` on `tools/call` spans.
    #[serde(default)]
    pub arguments: bool,
    /// `gen_ai.tool.call.result` on `tools/call` spans.
    #[serde(default)]
    pub results: bool,
    /// The most bytes of each captured value; default 4096.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: usize,
    /// More keys whose values are redacted (besides password, token, secret, api key,
    /// authorization, cookie, private key, credential, session id, signature, bearer).
    #[serde(default)]
    pub redact: Vec<String>,
}

impl Default for CaptureSection {
    fn default() -> Self {
        CaptureSection {
            arguments: false,
            results: false,
            max_bytes: default_max_bytes(),
            redact: Vec::new(),
        }
    }
}

fn default_max_bytes() -> usize {
    4096
}

/// The telemetry sections of a config file.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TelemetryConfig {
    /// `[telemetry]`.
    #[serde(default)]
    pub telemetry: TelemetrySection,
}

impl TelemetryConfig {
    /// The top-level sections this crate owns.
    pub const SECTIONS: [&'static str; 1] = ["telemetry"];

    /// Parses the telemetry sections of a whole config file's TOML text.
    pub fn parse(text: &str) -> Result<TelemetryConfig, String> {
        let mut config: TelemetryConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if config.telemetry.capture.arguments || config.telemetry.capture.results {
            config.telemetry.config_secrets =
                SecretValues(crate::capture::config_secret_values(text));
        }
        Ok(config)
    }
}

impl TelemetrySection {
    /// Settings from the section, for a process named `service` unless the section names one.
    pub fn settings(&self, service: &str) -> TelemetrySettings {
        TelemetrySettings {
            endpoint: self.endpoint.clone(),
            protocol: self.protocol,
            service_name: Some(
                self.service_name
                    .clone()
                    .unwrap_or_else(|| service.to_owned()),
            ),
            no_traces: self.traces == Some(false),
            no_metrics: self.metrics == Some(false),
            no_logs: self.logs == Some(false),
            logs: None,
            #[cfg(feature = "prometheus")]
            prometheus: self.prometheus,
            capture: crate::CaptureSettings {
                arguments: self.capture.arguments,
                results: self.capture.results,
                max_bytes: self.capture.max_bytes,
                redact_keys: self.capture.redact.clone(),
                redact_values: self.config_secrets.0.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_reads_its_keys_and_refuses_typos() {
        let c = TelemetryConfig::parse(
            "[telemetry]\nendpoint = \"http://c:4318\"\ntraces = false\n[nats]\nurl = \"x\"\n",
        )
        .unwrap();
        let s = c.telemetry.settings("gw");
        assert_eq!(s.endpoint.as_deref(), Some("http://c:4318"));
        assert!(s.no_traces && !s.no_metrics && !s.no_logs);
        let c = TelemetryConfig::parse("[telemetry]\nlogs = false\n").unwrap();
        assert!(c.telemetry.settings("gw").no_logs);
        assert_eq!(s.service_name.as_deref(), Some("gw"));
        let err = TelemetryConfig::parse("[telemetry]\nendpont = \"x\"\n").unwrap_err();
        assert!(err.contains("endpont"), "{err}");
        let c = TelemetryConfig::parse("[telemetry]\nprotocol = \"grpc\"\n").unwrap();
        assert_eq!(
            c.telemetry.settings("gw").protocol,
            Some(crate::OtlpProtocol::Grpc)
        );
        let err = TelemetryConfig::parse("[telemetry]\nprotocol = \"http/json\"\n").unwrap_err();
        assert!(err.contains("http/json"), "{err}");
    }
}
