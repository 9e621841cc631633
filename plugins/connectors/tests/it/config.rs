//! `[connectors.*]` parsed from a config file's text, and what a bad section says.

use crate::support::{TempDir, Tools};
use toolyard::ServerBuilder;
use toolyard_connectors::ConnectorsConfig;

#[test]
fn the_sections_of_every_connector_parse_with_defaults() {
    let c = ConnectorsConfig::parse(
        r#"
        [server]
        name = "other crate's"
        [connectors.filesystem]
        roots = ["/srv/a", "/srv/b"]
        read_only = true
        [connectors.sql]
        url = "sqlite:/tmp/x.db"
        "#,
    )
    .unwrap();
    let fs = c.connectors.filesystem.unwrap();
    assert_eq!(fs.roots.len(), 2);
    assert!(fs.read_only);
    assert_eq!(fs.max_entries, 10_000);
    let sql = c.connectors.sql.unwrap();
    assert!(!sql.allow_writes);
    assert_eq!(sql.max_rows, 1000);
}

#[test]
fn unknown_keys_and_connectors_are_refused_by_name() {
    let err = ConnectorsConfig::parse("[connectors.filesystem]\nroots = []\nreadonly = true\n")
        .unwrap_err();
    assert!(err.contains("readonly"), "{err}");
    let err = ConnectorsConfig::parse("[connectors.ftp]\nurl = \"x\"\n").unwrap_err();
    assert!(err.contains("ftp"), "{err}");
    assert!(ConnectorsConfig::parse("").unwrap().is_empty());
}

#[tokio::test]
async fn one_read_only_switch_covers_every_connector() {
    let dir = TempDir::new("switch");
    let text = format!(
        "[connectors]\nread_only = true\n\n[connectors.filesystem]\nroots = [{:?}]\n\n[connectors.sql]\nurl = \"sqlite::memory:\"\nallow_writes = true\n",
        dir.path().display().to_string()
    );
    let config = ConnectorsConfig::parse(&text).unwrap();
    let builder = config
        .install(ServerBuilder::new("switch", "0"))
        .expect("the connectors start");
    let names = Tools::start(builder).await.names().await;
    for write in [
        "write_file",
        "edit_file",
        "create_directory",
        "move_file",
        "delete_path",
        "execute",
    ] {
        assert!(
            !names.contains(&write.to_owned()),
            "{write} offered: {names:?}"
        );
    }
    assert!(names.contains(&"read_text_file".to_owned()) && names.contains(&"query".to_owned()));
}

#[test]
fn a_literal_credential_is_refused_without_being_quoted_back() {
    let err = ConnectorsConfig::parse(
        "[connectors.slack]\ntoken = \"xoxb-1111-live-token\"\n\n[connectors.gdrive]\n",
    )
    .unwrap_err();
    assert!(err.starts_with("line 2:"), "{err}");
    assert!(
        err.contains("${VAR}"),
        "the error says how to write it: {err}"
    );
    assert!(!err.contains("xoxb-1111"), "the token is not echoed: {err}");
}
