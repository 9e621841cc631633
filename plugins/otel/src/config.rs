//! The config file's `[telemetry]` section (the binary composes the file from each crate's
//! sections). Flags and the standard `OTEL_*` variables override it.

use crate::TelemetrySettings;
use serde::Deserialize;

/// `[telemetry]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySection {
    /// The OTLP/HTTP base endpoint, e.g. `http://collector:4318`.
    pub endpoint: Option<String>,
    /// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
    pub service_name: Option<String>,
    /// Serve `GET /metrics` (Prometheus text format) on the HTTP server.
    #[serde(default)]
    pub prometheus: bool,
    /// Export traces (default true).
    pub traces: Option<bool>,
    /// Export metrics (default true).
    pub metrics: Option<bool>,
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
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

impl TelemetrySection {
    /// Settings from the section, for a process named `service` unless the section names one.
    pub fn settings(&self, service: &str) -> TelemetrySettings {
        TelemetrySettings {
            endpoint: self.endpoint.clone(),
            service_name: Some(
                self.service_name
                    .clone()
                    .unwrap_or_else(|| service.to_owned()),
            ),
            no_traces: self.traces == Some(false),
            no_metrics: self.metrics == Some(false),
            #[cfg(feature = "prometheus")]
            prometheus: self.prometheus,
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
        assert!(s.no_traces && !s.no_metrics);
        assert_eq!(s.service_name.as_deref(), Some("gw"));
        let err = TelemetryConfig::parse("[telemetry]\nendpont = \"x\"\n").unwrap_err();
        assert!(err.contains("endpont"), "{err}");
    }
}
