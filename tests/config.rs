//! Configuration: layering, errors that name key/value/source, the shipped file, the report.
//! Never reads the process environment (variables are injected) nor the working directory
//! (files are temp files; the shipped config is found through CARGO_MANIFEST_DIR).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use shardloop::config::{
    Backend, Compression, Config, ConfigArgs, ConfigError, ConfigFile, LoadOptions, Loaded, Origin,
    Overrides, Section, SectionFault, SectionSpec,
};
use shardloop::runtime::{
    DEFAULT_IDLE_WAIT, DEFAULT_LATE_WAKE_PERCENT, DEFAULT_LATE_WAKE_THRESHOLD,
    DEFAULT_SPIN_BEFORE_PARK, DEFAULT_TICK,
};

fn shipped() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/shard.toml")
}

/// A temp file holding `text`; kept alive by the returned handle.
fn toml_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("temp file");
    file.write_all(text.as_bytes()).expect("write temp file");
    file
}

fn options(file: ConfigFile, env: &[(&str, &str)], overrides: Overrides) -> LoadOptions {
    LoadOptions {
        file,
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        overrides,
        sections: Vec::new(),
    }
}

fn load(file: ConfigFile, env: &[(&str, &str)], overrides: Overrides) -> Loaded {
    Config::load(&options(file, env, overrides)).unwrap_or_else(|e| panic!("load failed: {e}"))
}

fn load_err(file: ConfigFile, env: &[(&str, &str)], overrides: Overrides) -> ConfigError {
    match Config::load(&options(file, env, overrides)) {
        Ok(loaded) => panic!("expected an error, got {:?}", loaded.config),
        Err(e) => e,
    }
}

fn required(file: &tempfile::NamedTempFile) -> ConfigFile {
    ConfigFile::Required(file.path().to_path_buf())
}

fn file_origin(file: &tempfile::NamedTempFile, line: usize) -> Origin {
    Origin::File {
        path: file.path().to_path_buf(),
        line: Some(line),
    }
}

fn env_origin(var: &str) -> Origin {
    Origin::Env {
        var: var.to_owned(),
    }
}

/// `err` is the unknown-key error for `key`, from `origin`.
fn assert_unknown_key(err: &ConfigError, key: &str, origin: &Origin) {
    assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err}");
    assert_eq!(err.key(), Some(key));
    assert_eq!(err.origin(), Some(origin));
}

#[test]
fn defaults_are_documented_values_and_match_the_runtime() {
    let loaded = load(ConfigFile::None, &[], Overrides::default());
    let config = &loaded.config;
    assert_eq!(*config, Config::default());
    assert_eq!(config.server.idle_wait, DEFAULT_IDLE_WAIT);
    assert_eq!(config.server.spin_before_park, DEFAULT_SPIN_BEFORE_PARK);
    assert_eq!(config.server.tick, DEFAULT_TICK);
    assert_eq!(config.server.tick, Duration::from_millis(8));
    assert_eq!(
        config.server.late_wake_threshold,
        DEFAULT_LATE_WAKE_THRESHOLD
    );
    assert_eq!(config.server.late_wake_percent, DEFAULT_LATE_WAKE_PERCENT);
    assert_eq!(config.server.loop_stats_interval, Duration::from_secs(60));
    assert!(config.server.probe_host);
    assert_eq!(config.world.generate.items, 190_728);
    assert_eq!(config.world.generate.mobiles, 33_158);
    assert_eq!(config.network.backend, Backend::Auto);
    assert_eq!(config.archive.compression, Compression::Zstd);
    assert_eq!(config.time.zone.name(), "UTC");
    assert_eq!(config.autosave.frequency, Duration::from_secs(3600));
    assert_eq!(config.autosave.warning, Duration::from_secs(60));
    assert_eq!(config.world.save_threads, 0);
    assert_eq!(config.world.disk_reserve, 64 << 20);
    assert_eq!(config.save_path(), Path::new("./data/Saves"));
    assert_eq!(loaded.origin("server.idle_wait"), Some(Origin::Default));
}

#[test]
fn missing_default_file_means_defaults() {
    let dir = tempfile::tempdir().expect("temp dir");
    let absent = ConfigFile::Optional(dir.path().join("shard.toml"));
    let loaded = load(absent, &[], Overrides::default());
    assert_eq!(loaded.config, Config::default());
    assert_eq!(loaded.file(), None);
}

#[test]
fn missing_explicit_file_is_an_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("nope.toml");
    let err = load_err(
        ConfigFile::Required(path.clone()),
        &[],
        Overrides::default(),
    );
    assert!(matches!(&err, ConfigError::MissingFile { path: p } if *p == path));
    assert!(err.to_string().contains("nope.toml"), "{err}");
    assert_eq!(ConfigError::EXIT_CODE, 2);
}

#[test]
fn file_overrides_defaults() {
    let file = toml_file(
        "[server]\nidle_wait = \"2ms\"\n\n[network]\nbackend = \"io_uring\"\n\
         listen = [\"0.0.0.0:2593\", \"[::]:2593\"]\n\n[world.generate]\nitems = 10\n\n\
         [time]\nzone = \"Europe/Berlin\"\n",
    );
    let loaded = load(required(&file), &[], Overrides::default());
    let config = &loaded.config;
    assert_eq!(config.server.idle_wait, Duration::from_millis(2));
    assert_eq!(config.network.backend, Backend::IoUring);
    assert_eq!(config.network.listen.len(), 2);
    assert_eq!(config.world.generate.items, 10);
    assert_eq!(config.world.generate.mobiles, 33_158);
    assert_eq!(config.time.zone.name(), "Europe/Berlin");
    assert_eq!(config.server.tick, DEFAULT_TICK);
    assert_eq!(
        loaded.origin("server.idle_wait"),
        Some(file_origin(&file, 2))
    );
    assert_eq!(
        loaded.origin("world.generate.items"),
        Some(file_origin(&file, 9))
    );
    assert_eq!(loaded.origin("server.tick"), Some(Origin::Default));
}

#[test]
fn env_overrides_file() {
    let file = toml_file("[server]\nidle_wait = \"2ms\"\ntick = \"4ms\"\n");
    let env = [
        ("SHARD_SERVER__IDLE_WAIT", "0ms"),
        ("SHARD_WORLD__GENERATE__SEED", "7"),
        ("SHARD_AUTOSAVE__ENABLED", "false"),
        ("PATH", "/usr/bin"),
        ("SHARDX_IGNORED", "1"),
    ];
    let loaded = load(required(&file), &env, Overrides::default());
    assert_eq!(loaded.config.server.idle_wait, Duration::ZERO);
    assert_eq!(loaded.config.server.tick, Duration::from_millis(4));
    assert_eq!(loaded.config.world.generate.seed, 7);
    assert!(!loaded.config.autosave.enabled);
    assert_eq!(
        loaded.origin("server.idle_wait"),
        Some(env_origin("SHARD_SERVER__IDLE_WAIT"))
    );
    assert_eq!(loaded.origin("server.tick"), Some(file_origin(&file, 3)));
}

#[test]
fn bare_zero_is_a_duration_but_other_bare_numbers_are_not() {
    let env = [("SHARD_SERVER__IDLE_WAIT", "0")];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    assert_eq!(loaded.config.server.idle_wait, Duration::ZERO);

    let env = [("SHARD_SERVER__IDLE_WAIT", "5")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("server.idle_wait"));
    assert!(err.to_string().contains("unit"), "{err}");
}

#[test]
fn cli_overrides_env() {
    let env = [
        ("SHARD_SERVER__IDLE_WAIT", "0ms"),
        ("SHARD_NETWORK__LISTEN", "[\"0.0.0.0:2593\"]"),
    ];
    let addr: SocketAddr = "127.0.0.1:3000".parse().expect("addr");
    let overrides = Overrides {
        idle_wait: Some(Duration::from_millis(3)),
        listen: vec![addr],
        data_dir: Some(PathBuf::from("/srv/shard")),
    };
    let loaded = load(ConfigFile::None, &env, overrides);
    let config = &loaded.config;
    assert_eq!(config.server.idle_wait, Duration::from_millis(3));
    assert_eq!(config.network.listen, vec![addr]);
    assert_eq!(config.server.data_dir, Path::new("/srv/shard"));
    assert_eq!(config.save_path(), Path::new("/srv/shard/Saves"));
    let cli = |flag: &str| {
        Some(Origin::Cli {
            flag: flag.to_owned(),
        })
    };
    assert_eq!(loaded.origin("server.idle_wait"), cli("--idle-wait"));
    assert_eq!(loaded.origin("network.listen"), cli("--listen"));
    assert_eq!(loaded.origin("server.data_dir"), cli("--data-dir"));
}

#[test]
fn env_sets_a_list() {
    let env = [("SHARD_NETWORK__LISTEN", "[\"0.0.0.0:2593\", \"[::]:2594\"]")];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    let listen: Vec<String> = loaded
        .config
        .network
        .listen
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(listen, ["0.0.0.0:2593", "[::]:2594"]);

    let env = [("SHARD_NETWORK__LISTEN", "0.0.0.0:2593, [::]:2594")];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    assert_eq!(loaded.config.network.listen.len(), 2, "comma-separated");
}

#[test]
fn env_values_for_text_keys_stay_text() {
    let env = [
        ("SHARD_SERVER__DATA_DIR", "2024"),
        ("SHARD_WORLD__SAVE_DIR", "true"),
    ];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    assert_eq!(loaded.config.server.data_dir, Path::new("2024"));
    assert_eq!(loaded.config.world.save_dir, Path::new("true"));
}

#[test]
fn unknown_key_in_file_names_key_file_and_line() {
    let file = toml_file("# a comment\n[server]\ntick = \"8ms\"\nidle_wiat = \"5ms\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("server.idle_wiat"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 4)));
    let message = err.to_string();
    let where_ = format!("{} line 4", file.path().display());
    assert!(message.contains(&where_), "{message}");
    assert!(message.contains("server.idle_wiat"), "{message}");
    assert!(message.contains("\"5ms\""), "{message}");
    assert!(
        message.contains("idle_wait"),
        "lists the valid keys: {message}"
    );
}

#[test]
fn unknown_section_in_file_is_an_error() {
    let file = toml_file("[server]\ntick = \"8ms\"\n\n[srever]\nidle_wait = \"5ms\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("srever"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 4)));
}

#[test]
fn bad_duration_in_file_names_key_value_and_line() {
    let file = toml_file("[autosave]\nenabled = true\nfrequency = \"soon\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("autosave.frequency"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 3)));
    assert!(err.to_string().contains("\"soon\""), "{err}");
}

#[test]
fn bad_duration_in_env_names_the_variable() {
    let env = [("SHARD_SERVER__IDLE_WAIT", "fast")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("server.idle_wait"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_SERVER__IDLE_WAIT")));
    let message = err.to_string();
    assert!(
        message.contains("environment variable SHARD_SERVER__IDLE_WAIT"),
        "{message}"
    );
    assert!(message.contains("\"fast\""), "{message}");
}

#[test]
fn network_and_spin_limits_are_checked() {
    let cases = [
        (
            "SHARD_SERVER__SPIN_BEFORE_PARK",
            "1s",
            "server.spin_before_park",
            "at most 10ms",
        ),
        (
            "SHARD_NETWORK__MAX_PACKET",
            "2",
            "network.max_packet",
            "between 3",
        ),
        (
            "SHARD_NETWORK__IDLE_TIMEOUT",
            "soon",
            "network.idle_timeout",
            "\"soon\"",
        ),
    ];
    for (var, value, key, why) in cases {
        let err = load_err(ConfigFile::None, &[(var, value)], Overrides::default());
        assert_eq!(err.key(), Some(key), "{err}");
        assert_eq!(err.origin(), Some(&env_origin(var)), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    let ok = [
        ("SHARD_SERVER__SPIN_BEFORE_PARK", "0us"),
        ("SHARD_NETWORK__IDLE_TIMEOUT", "0s"),
    ];
    let loaded = load(ConfigFile::None, &ok, Overrides::default());
    assert!(loaded.config.server.spin_before_park.is_zero());
    assert!(loaded.config.network.idle_timeout.is_zero());
}

/// Environment variables, the key the error must name, a phrase it must say.
type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);

/// Each case's variables make the load fail, naming the case's key and saying its phrase.
fn assert_invalid(cases: &[Case]) {
    for &(env, key, why) in cases {
        let err = load_err(ConfigFile::None, env, Overrides::default());
        assert_eq!(err.key(), Some(key), "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
}

#[test]
fn admission_and_flood_limits_are_checked() {
    let cases: [Case; 6] = [
        (
            &[("SHARD_NETWORK__MAX_PER_IP", "0")],
            "network.max_per_ip",
            "at least 1",
        ),
        (
            &[("SHARD_NETWORK__LOGIN_TIMEOUT", "0s")],
            "network.login_timeout",
            "greater than 0",
        ),
        (
            &[
                ("SHARD_NETWORK__IDLE_TIMEOUT", "30s"),
                ("SHARD_NETWORK__LOGIN_TIMEOUT", "1m"),
            ],
            "network.login_timeout",
            "not be longer than network.idle_timeout",
        ),
        (
            &[("SHARD_NETWORK__OUTBOUND_BUDGET", "1000")],
            "network.outbound_budget",
            "at least network.send_buffer_size",
        ),
        (
            &[("SHARD_NETWORK__PING_BURST", "0")],
            "network.ping_burst",
            "at least 1",
        ),
        (
            &[("SHARD_NETWORK__PING_RATE", "lots")],
            "network.ping_rate",
            "\"lots\"",
        ),
    ];
    assert_invalid(&cases);
    // A rate of 0 turns a limit off; its burst may then be anything.
    let off = [
        ("SHARD_NETWORK__PING_RATE", "0"),
        ("SHARD_NETWORK__PING_BURST", "0"),
    ];
    let loaded = load(ConfigFile::None, &off, Overrides::default());
    assert_eq!(
        shardloop::net::Limits::from(&loaded.config.network).ping_rate,
        None
    );
}

#[test]
fn output_limits_are_checked() {
    let cases: [Case; 5] = [
        (
            &[("SHARD_NETWORK__SEND_SOFT_LIMIT", "262144")],
            "network.send_soft_limit",
            "less than network.send_buffer_size",
        ),
        (
            &[("SHARD_NETWORK__SEND_SOFT_TIMEOUT", "500ms")],
            "network.send_soft_timeout",
            "between 1s and 1h",
        ),
        (
            &[("SHARD_NETWORK__SEND_SOFT_TIMEOUT", "2h")],
            "network.send_soft_timeout",
            "between 1s and 1h",
        ),
        (
            &[("SHARD_NETWORK__SOCKET_SEND_BUFFER", "1024")],
            "network.socket_send_buffer",
            "between 4096",
        ),
        (
            // One connection's own limit and its kernel buffer (doubled) do not fit.
            &[
                ("SHARD_NETWORK__SEND_BUFFER_SIZE", "65536"),
                ("SHARD_NETWORK__SEND_SOFT_LIMIT", "0"),
                ("SHARD_NETWORK__OUTBOUND_BUDGET", "131072"),
            ],
            "network.outbound_budget",
            "plus twice network.socket_send_buffer",
        ),
    ];
    assert_invalid(&cases);
    // A soft limit of 0 is off, whatever its timeout.
    let off = [
        ("SHARD_NETWORK__SEND_SOFT_LIMIT", "0"),
        ("SHARD_NETWORK__SEND_SOFT_TIMEOUT", "0s"),
    ];
    let loaded = load(ConfigFile::None, &off, Overrides::default());
    assert_eq!(
        shardloop::net::Limits::from(&loaded.config.network).send_soft_limit,
        0
    );
}

#[test]
fn connect_rate_prefix_and_prelogin_limits_are_checked_naming_key_and_value() {
    let cases: [Case; 8] = [
        (
            &[("SHARD_NETWORK__MAX_PER_IPV6_PREFIX", "0")],
            "network.max_per_ipv6_prefix",
            "at least 1",
        ),
        (
            &[("SHARD_NETWORK__IPV6_PREFIX", "72")],
            "network.ipv6_prefix",
            "between 32 and 64 bits",
        ),
        (
            &[("SHARD_NETWORK__IPV6_PREFIX", "16")],
            "network.ipv6_prefix",
            "= 16",
        ),
        (
            &[("SHARD_NETWORK__IPV4_PREFIX", "33")],
            "network.ipv4_prefix",
            "between 8 and 32 bits",
        ),
        (
            &[("SHARD_NETWORK__MAX_PRELOGIN", "0")],
            "network.max_prelogin",
            "between 1 and network.max_connections (1024)",
        ),
        (
            &[("SHARD_NETWORK__MAX_CONNECTIONS", "100")],
            "network.max_prelogin",
            "= 256",
        ),
        (
            &[("SHARD_NETWORK__CONNECT_BURST", "0")],
            "network.connect_burst",
            "at least 1",
        ),
        (
            &[("SHARD_NETWORK__CONNECT_BAN", "a while")],
            "network.connect_ban",
            "a while",
        ),
    ];
    assert_invalid(&cases);
    // Off: no connect rate (its burst and ban may then be anything), no IPv4 prefix cap.
    let off = [
        ("SHARD_NETWORK__CONNECT_RATE", "0"),
        ("SHARD_NETWORK__CONNECT_BURST", "0"),
        ("SHARD_NETWORK__MAX_PER_IPV4_PREFIX", "0"),
    ];
    let limits = shardloop::net::Limits::from(
        &load(ConfigFile::None, &off, Overrides::default())
            .config
            .network,
    );
    assert_eq!(
        (limits.connect_rate, limits.max_per_ipv4_prefix),
        (None, None)
    );
    // The defaults: 4 connects a second in bursts of 16, a minute's ban, IPv6 by /56, a
    // quarter of the connections not logged in.
    let limits = shardloop::net::Limits::from(
        &load(ConfigFile::None, &[], Overrides::default())
            .config
            .network,
    );
    assert_eq!(
        limits.connect_rate,
        Some(shardloop::net::Rate {
            per_sec: 4,
            burst: 16
        })
    );
    assert_eq!(limits.connect_ban, Duration::from_secs(60));
    assert_eq!((limits.ipv6_prefix, limits.max_per_ipv6_prefix), (56, 32));
    assert_eq!((limits.max_prelogin, limits.max_connections), (256, 1024));
    let on = [
        ("SHARD_NETWORK__MAX_PER_IPV4_PREFIX", "8"),
        ("SHARD_NETWORK__IPV4_PREFIX", "22"),
    ];
    let limits = shardloop::net::Limits::from(
        &load(ConfigFile::None, &on, Overrides::default())
            .config
            .network,
    );
    assert_eq!(
        (limits.max_per_ipv4_prefix, limits.ipv4_prefix),
        (Some(8), 22)
    );
}

#[test]
fn the_metrics_token_is_checked_and_never_shown() {
    const TOKEN: &str = "s3cr3t-t0ken-0123456789abcdef";
    // From the environment: in effect, and redacted in the report.
    let loaded = load(
        ConfigFile::None,
        &[("SHARD_METRICS__TOKEN", TOKEN)],
        Overrides::default(),
    );
    assert_eq!(loaded.config.metrics.token(), Some(TOKEN));
    let report = loaded.report();
    let line = report
        .lines()
        .find(|l| l.starts_with("metrics.token = "))
        .unwrap_or_else(|| panic!("no metrics.token line in\n{report}"));
    assert!(line.contains("\"(redacted)\""), "{line}");
    assert!(
        line.ends_with("(environment variable SHARD_METRICS__TOKEN)"),
        "{line}"
    );
    assert!(!report.contains(TOKEN), "{report}");
    assert!(!format!("{:?}", loaded.config).contains(TOKEN));
    // Unset: shown as the empty string it is.
    let report = load(ConfigFile::None, &[], Overrides::default()).report();
    assert!(report.contains("metrics.token = \"\""), "{report}");
    // A value of the wrong type in the file is refused without being quoted back.
    let file = toml_file("[metrics]\ntoken = 123456789012345678\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("metrics.token"), "{err}");
    assert!(!err.to_string().contains("123456789012345678"), "{err}");
    // All digits is a token like any other (the environment layer keeps text keys text).
    let digits = "12345678901234567890";
    let loaded = load(
        ConfigFile::None,
        &[("SHARD_METRICS__TOKEN", digits)],
        Overrides::default(),
    );
    assert_eq!(loaded.config.metrics.token(), Some(digits));
    // Refused, naming the key and never the value: too short, a character a bearer token
    // cannot hold.
    for (value, why) in [
        ("short-0123", "16 to 512 characters"),
        ("s3cr3t t0ken 0123456789abcdef", "letters, digits"),
    ] {
        let err = load_err(
            ConfigFile::None,
            &[("SHARD_METRICS__TOKEN", value)],
            Overrides::default(),
        );
        assert_eq!(err.key(), Some("metrics.token"), "{err}");
        let text = err.to_string();
        assert!(text.contains(why), "{text}");
        assert!(!text.contains(value), "the error quotes the token: {text}");
    }
}

#[test]
fn unknown_key_in_env_names_the_variable() {
    let env = [("SHARD_SERVER__IDEL_WAIT", "0ms")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_unknown_key(
        &err,
        "server.idel_wait",
        &env_origin("SHARD_SERVER__IDEL_WAIT"),
    );
}

#[test]
fn the_fault_injection_switch_is_no_configuration_key() {
    // Only a test build's hidden flag sets it (`--fault-inject-phase-panic`): a file or a
    // variable naming it is refused like any unknown key, and it is not among the valid keys.
    let file = toml_file("[server]\nfault_inject_phase_panic = \"1s\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_unknown_key(
        &err,
        "server.fault_inject_phase_panic",
        &file_origin(&file, 2),
    );
    let message = err.to_string();
    assert!(
        message.contains("idle_wait"),
        "lists the valid keys: {message}"
    );
    assert_eq!(
        message.matches("fault_inject_phase_panic").count(),
        1,
        "named once, as the offender: {message}"
    );

    let env = [("SHARD_SERVER__FAULT_INJECT_PHASE_PANIC", "1s")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_unknown_key(
        &err,
        "server.fault_inject_phase_panic",
        &env_origin("SHARD_SERVER__FAULT_INJECT_PHASE_PANIC"),
    );
}

#[test]
fn malformed_env_name_is_an_error() {
    let env = [("SHARD_SERVER__", "1")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert!(err.to_string().contains("SHARD_SERVER__"), "{err}");
}

#[test]
fn orchestrator_variables_are_ignored_with_one_warning() {
    // What a Kubernetes Service named `shard` injects into every pod, plus an unknown section
    // and a config variable one underscore short.
    let env = [
        ("SHARD_PORT", "tcp://10.0.0.7:2593"),
        ("SHARD_SERVICE_HOST", "10.0.0.7"),
        ("SHARD_PORT_2593_TCP_ADDR", "10.0.0.7"),
        ("SHARD_DATABASE__URL", "postgres://x"),
        ("SHARD_SERVER_IDLE_WAIT", "0ms"),
        ("SHARD_SERVER__IDLE_WAIT", "3ms"),
    ];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    assert_eq!(loaded.config.server.idle_wait, Duration::from_millis(3));
    assert_eq!(
        loaded.ignored_env(),
        [
            "SHARD_DATABASE__URL",
            "SHARD_PORT",
            "SHARD_PORT_2593_TCP_ADDR",
            "SHARD_SERVER_IDLE_WAIT",
            "SHARD_SERVICE_HOST"
        ]
    );
    let warning = loaded.ignored_env_warning().expect("a warning");
    assert!(
        warning.starts_with("ignored 5 SHARD_* environment variable(s)"),
        "{warning}"
    );
    assert!(
        warning.contains("SHARD_SERVER_IDLE_WAIT (did you mean SHARD_SERVER__IDLE_WAIT?)"),
        "{warning}"
    );
    assert!(!warning.contains("SHARD_PORT (did you mean"), "{warning}");
    let report = loaded.report();
    assert!(report.ends_with(&format!("# {warning}\n")), "{report}");

    let quiet = load(ConfigFile::None, &env[5..], Overrides::default());
    assert!(quiet.ignored_env().is_empty());
    assert_eq!(quiet.ignored_env_warning(), None);
    assert!(!quiet.report().contains('#'));
}

#[test]
fn a_known_section_with_an_unknown_key_is_still_an_error() {
    // Only names outside the configuration's sections are ignored: a typo inside one is not.
    let env = [("SHARD_PORT", "2593"), ("SHARD_NETWORK__PORT", "2593")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("network.port"), "{err}");
}

#[test]
fn bad_enum_lists_the_choices() {
    let file = toml_file("[network]\nbackend = \"kqueue\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("network.backend"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 2)));
    let message = err.to_string();
    assert!(message.contains("\"kqueue\""), "{message}");
    assert!(message.contains("auto, epoll, io_uring"), "{message}");

    let env = [("SHARD_ARCHIVE__COMPRESSION", "ZSTD")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("archive.compression"));
    assert!(err.to_string().contains("zstd, gzip, zip, none"), "{err}");
}

#[test]
fn bad_list_element_names_its_index() {
    let file = toml_file("[network]\nlisten = [\"127.0.0.1:2593\", \"localhost\"]\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("network.listen[1]"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 2)));
    assert!(err.to_string().contains("\"localhost\""), "{err}");
}

#[test]
fn wrong_type_names_what_was_expected() {
    let env = [("SHARD_SERVER__LATE_WAKE_THRESHOLD", "often")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("server.late_wake_threshold"));
    assert!(err.to_string().contains("\"often\""), "{err}");
}

#[test]
fn out_of_range_values_name_key_and_source() {
    let file = toml_file("[server]\nlate_wake_percent = 250\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("server.late_wake_percent"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 2)));
    assert!(err.to_string().contains("= 250"), "{err}");

    let env = [("SHARD_SERVER__TICK", "0ms")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("server.tick"));

    let env = [
        ("SHARD_ARCHIVE__COMPRESSION", "gzip"),
        ("SHARD_ARCHIVE__LEVEL", "12"),
    ];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("archive.level"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_ARCHIVE__LEVEL")));

    let env = [("SHARD_AUTOSAVE__WARNING", "2h")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("autosave.warning"));

    let env = [("SHARD_AUTOSAVE__FREQUENCY", "25h")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("autosave.frequency"));
    assert!(err.to_string().contains("24h"), "{err}");

    let env = [("SHARD_WORLD__SAVE_THREADS", "1000")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("world.save_threads"));

    let env = [("SHARD_WORLD__DISK_RESERVE", "4096")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("world.disk_reserve"));
    assert!(err.to_string().contains("1 MiB"), "{err}");
    let env = [("SHARD_WORLD__DISK_RESERVE", "0")];
    let off = load(ConfigFile::None, &env, Overrides::default());
    assert_eq!(off.config.world.disk_reserve, 0, "0 turns the reserve off");
}

#[test]
fn a_bad_remote_archive_url_or_endpoint_names_its_key_and_never_holds_a_secret() {
    let file = toml_file("[archive.remote]\nurl = \"https://bucket/prefix\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_eq!(err.key(), Some("archive.remote.url"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 2)));
    assert!(err.to_string().contains("s3://"), "{err}");

    // Credentials in the URL: refused, and the refusal says where they belong.
    let env = [("SHARD_ARCHIVE__REMOTE__URL", "s3://AKIA:secret@bkt/p")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("archive.remote.url"));
    assert_eq!(
        err.origin(),
        Some(&env_origin("SHARD_ARCHIVE__REMOTE__URL"))
    );
    assert!(err.to_string().contains("AWS_SECRET_ACCESS_KEY"), "{err}");

    let env = [
        ("SHARD_ARCHIVE__REMOTE__URL", "s3://bkt/p"),
        ("SHARD_ARCHIVE__REMOTE__ENDPOINT", "http://127.0.0.1:9000"),
    ];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("archive.remote.endpoint"));
    assert!(err.to_string().contains("allow_http"), "{err}");

    let env = [
        ("SHARD_ARCHIVE__REMOTE__RETRY_INITIAL", "1m"),
        ("SHARD_ARCHIVE__REMOTE__RETRY_MAX", "10s"),
    ];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("archive.remote.retry_max"));

    let env = [
        ("SHARD_ARCHIVE__REMOTE__URL", "s3://bkt/shard-1"),
        ("SHARD_ARCHIVE__REMOTE__ENDPOINT", "http://127.0.0.1:9000"),
        ("SHARD_ARCHIVE__REMOTE__ALLOW_HTTP", "true"),
    ];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    let remote = loaded.config.archive.remote.remote().unwrap();
    assert_eq!(remote.url.to_string(), "s3://bkt/shard-1");
}

#[test]
fn bad_time_zone_is_an_error() {
    let env = [("SHARD_TIME__ZONE", "Mars/Olympus_Mons")];
    let err = load_err(ConfigFile::None, &env, Overrides::default());
    assert_eq!(err.key(), Some("time.zone"));
    assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
    let loaded = load(
        ConfigFile::None,
        &[("SHARD_TIME__ZONE", "UTC")],
        Overrides::default(),
    );
    assert_eq!(loaded.config.time.zone.name(), "UTC");
}

#[test]
fn toml_syntax_error_names_file_and_line() {
    let file = toml_file("[server]\ntick = \"8ms\"\nidle_wait = \"1s\n");
    let err = load_err(required(&file), &[], Overrides::default());
    match &err {
        ConfigError::Syntax { path, line, .. } => {
            assert_eq!(path, file.path());
            assert_eq!(*line, Some(3));
        }
        other => panic!("expected a syntax error, got {other}"),
    }
    let where_ = format!("{} line 3", file.path().display());
    assert!(err.to_string().contains(&where_), "{err}");
}

#[test]
fn shipped_file_equals_defaults_and_sets_every_key() {
    let loaded = load(ConfigFile::Required(shipped()), &[], Overrides::default());
    assert_eq!(loaded.config, Config::default());
    for entry in loaded.entries() {
        assert!(
            matches!(entry.origin, Origin::File { line: Some(_), .. }),
            "config/shard.toml does not set {} (origin {})",
            entry.key,
            entry.origin
        );
    }
}

#[test]
fn report_shows_every_key_with_its_source() {
    let file = toml_file("[server]\ntick = \"4ms\"\n");
    let env = [("SHARD_AUTOSAVE__ENABLED", "false")];
    let overrides = Overrides {
        idle_wait: Some(Duration::ZERO),
        ..Overrides::default()
    };
    let loaded = load(required(&file), &env, overrides);
    let report = loaded.report();
    let line = |key: &str| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no line for {key} in\n{report}"))
            .to_owned()
    };
    assert!(line("server.tick").contains("\"4ms\""), "{report}");
    let from_file = format!("({} line 2)", file.path().display());
    assert!(line("server.tick").ends_with(&from_file), "{report}");
    assert!(
        line("autosave.enabled").ends_with("(environment variable SHARD_AUTOSAVE__ENABLED)"),
        "{report}"
    );
    assert!(
        line("server.idle_wait").ends_with("(command line --idle-wait)"),
        "{report}"
    );
    assert!(line("server.late_wake_percent").ends_with("(default)"));
    assert!(line("world.generate.items").contains("= 190728"));
    assert!(line("network.listen").contains("[\"0.0.0.0:2593\"]"));
    assert_eq!(report.lines().count(), loaded.entries().len());
    assert!(report.lines().next().unwrap_or("").starts_with("server."));
}

#[test]
fn loop_builder_takes_the_server_section() {
    let env = [
        ("SHARD_SERVER__IDLE_WAIT", "2ms"),
        ("SHARD_SERVER__TICK", "4ms"),
    ];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    let debug = format!("{:?}", loaded.config.server.loop_builder());
    assert!(debug.contains("idle_wait: 2ms"), "{debug}");
    assert!(debug.contains("tick: 4ms"), "{debug}");
}

#[derive(Parser)]
struct TestCli {
    #[command(flatten)]
    config: ConfigArgs,
}

#[test]
fn config_args_map_flags_to_layers() {
    let cli = TestCli::try_parse_from([
        "shardloop",
        "--config",
        "x.toml",
        "--idle-wait",
        "0ms",
        "--listen",
        "127.0.0.1:1",
        "--listen",
        "127.0.0.1:2",
        "--data-dir",
        "/d",
    ])
    .expect("flags parse");
    let args = cli.config;
    assert_eq!(
        args.config_file(),
        ConfigFile::Required(PathBuf::from("x.toml"))
    );
    let overrides = args.overrides();
    assert_eq!(overrides.idle_wait, Some(Duration::ZERO));
    assert_eq!(overrides.listen.len(), 2);
    assert_eq!(overrides.data_dir, Some(PathBuf::from("/d")));

    let none = TestCli::try_parse_from(["shardloop"]).expect("no flags");
    assert_eq!(none.config.config_file(), ConfigFile::default());
    assert!(TestCli::try_parse_from(["shardloop", "--idle-wait", "5"]).is_err());
}

// ---- Game sections --------------------------------------------------------------------------

/// A game's own table, as a game declares one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Lantern {
    token: String,
    port: u16,
    radius: u32,
}

impl Default for Lantern {
    fn default() -> Self {
        Lantern {
            token: "none".to_owned(),
            port: 7000,
            radius: 5,
        }
    }
}

impl Section for Lantern {
    const NAME: &'static str = "lantern";

    fn check(&self) -> Result<(), (&'static str, String)> {
        if self.radius > 20 {
            return Err(("radius", "must be at most 20".to_owned()));
        }
        Ok(())
    }
}

/// A section that took keys over: one still an engine key, one from a table that is gone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Demo {
    move_rate: u32,
    glow: bool,
}

impl Section for Demo {
    const NAME: &'static str = "demo";
    const RENAMED: &'static [(&'static str, &'static str)] =
        &[("network.move_rate", "move_rate"), ("legacy.glow", "glow")];
}

/// A section that claims an engine section's name.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Clash {
    port: u16,
}

impl Section for Clash {
    const NAME: &'static str = "network";
}

/// A section whose name cannot be a `SHARD_<NAME>__<KEY>` variable.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct BadName {
    port: u16,
}

impl Section for BadName {
    const NAME: &'static str = "lan__tern";
}

fn with_sections(
    file: ConfigFile,
    env: &[(&str, &str)],
    sections: Vec<SectionSpec>,
) -> Result<Loaded, ConfigError> {
    let options = LoadOptions {
        file,
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        overrides: Overrides::default(),
        sections,
    };
    Config::load(&options)
}

fn with_lantern(file: ConfigFile, env: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    with_sections(file, env, vec![SectionSpec::of::<Lantern>()])
}

fn section_err(result: Result<Loaded, ConfigError>) -> ConfigError {
    match result {
        Ok(loaded) => panic!("expected an error, got {:?}", loaded.config),
        Err(e) => e,
    }
}

#[test]
fn a_game_section_is_read_from_file_then_env_over_its_defaults() {
    let file = toml_file("[lantern]\ntoken = \"abc\"\nradius = 3\n");
    let env = [("SHARD_LANTERN__RADIUS", "9")];
    let loaded = with_lantern(required(&file), &env).unwrap_or_else(|e| panic!("{e}"));
    let lantern = loaded.config.section::<Lantern>();
    assert_eq!(
        lantern,
        Lantern {
            token: "abc".to_owned(),
            port: 7000,
            radius: 9,
        }
    );
    assert_eq!(loaded.origin("lantern.token"), Some(file_origin(&file, 2)));
    assert_eq!(
        loaded.origin("lantern.radius"),
        Some(env_origin("SHARD_LANTERN__RADIUS"))
    );
    assert_eq!(loaded.origin("lantern.port"), Some(Origin::Default));
    // The engine's keys load as before beside it.
    assert_eq!(loaded.config.server.tick, DEFAULT_TICK);

    // A variable of a declared section is configuration, typed by the section's defaults.
    let env = [("SHARD_LANTERN__TOKEN", "1234")];
    let loaded = with_lantern(ConfigFile::None, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.section::<Lantern>().token, "1234");
    assert!(
        loaded.ignored_env().is_empty(),
        "{:?}",
        loaded.ignored_env()
    );

    // Absent everywhere: the section's defaults.
    let loaded = with_lantern(ConfigFile::None, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.section::<Lantern>(), Lantern::default());
    assert_eq!(loaded.origin("lantern.token"), Some(Origin::Default));
}

#[test]
fn a_section_not_declared_reads_as_its_default() {
    assert_eq!(Config::default().section::<Lantern>(), Lantern::default());
    let env = [("SHARD_LANTERN__TOKEN", "abc")];
    let loaded = load(ConfigFile::None, &env, Overrides::default());
    assert_eq!(loaded.config.section::<Lantern>(), Lantern::default());
    assert_eq!(loaded.ignored_env(), ["SHARD_LANTERN__TOKEN"]);
    // Declared, but read as another section: that one's default.
    let loaded = with_lantern(ConfigFile::None, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.section::<Demo>(), Demo::default());
}

#[test]
fn configurations_differ_by_their_sections_values_only() {
    let at_defaults = with_lantern(ConfigFile::None, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(at_defaults.config, Config::default());
    let env = [("SHARD_LANTERN__RADIUS", "6")];
    let changed = with_lantern(ConfigFile::None, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(changed.config, Config::default());
    assert_eq!(changed.config, changed.config.clone());
    // The sections never appear in Config's serialized form.
    let text = toml::to_string(&changed.config).expect("serializes");
    assert!(!text.contains("lantern"), "{text}");
}

#[test]
fn unknown_key_in_a_section_names_key_line_and_the_valid_keys() {
    let file = toml_file("[lantern]\ntoken = \"abc\"\ntokn = \"x\"\n");
    let err = section_err(with_lantern(required(&file), &[]));
    assert_unknown_key(&err, "lantern.tokn", &file_origin(&file, 3));
    let message = err.to_string();
    let where_ = format!("{} line 3", file.path().display());
    assert!(message.contains(&where_), "{message}");
    assert!(message.contains("\"x\""), "{message}");
    assert!(message.contains("token, port, radius"), "{message}");

    let env = [("SHARD_LANTERN__TOKN", "x")];
    let err = section_err(with_lantern(ConfigFile::None, &env));
    assert_eq!(err.key(), Some("lantern.tokn"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_LANTERN__TOKN")));
}

#[test]
fn wrong_type_in_a_section_names_key_and_variable() {
    let env = [("SHARD_LANTERN__PORT", "lots")];
    let err = section_err(with_lantern(ConfigFile::None, &env));
    assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
    assert_eq!(err.key(), Some("lantern.port"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_LANTERN__PORT")));
    let message = err.to_string();
    assert!(
        message.contains("environment variable SHARD_LANTERN__PORT"),
        "{message}"
    );
    assert!(message.contains("\"lots\""), "{message}");

    // A section is a table.
    let file = toml_file("lantern = 5\n");
    let err = section_err(with_lantern(required(&file), &[]));
    assert_eq!(err.key(), Some("lantern"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 1)));
    assert!(err.to_string().contains("a table of keys"), "{err}");
}

#[test]
fn a_section_check_failure_names_key_value_and_origin() {
    let file = toml_file("[lantern]\nradius = 50\n");
    let err = section_err(with_lantern(required(&file), &[]));
    assert!(matches!(err, ConfigError::Invalid { .. }), "{err}");
    assert_eq!(err.key(), Some("lantern.radius"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 2)));
    let message = err.to_string();
    assert!(message.contains("lantern.radius = 50"), "{message}");
    assert!(message.contains("must be at most 20"), "{message}");

    let env = [("SHARD_LANTERN__RADIUS", "21")];
    let err = section_err(with_lantern(required(&file), &env));
    assert_eq!(err.key(), Some("lantern.radius"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_LANTERN__RADIUS")));
}

#[test]
fn an_undeclared_section_table_is_still_an_unknown_key() {
    let file = toml_file("[server]\ntick = \"8ms\"\n\n[lantern]\ntoken = \"abc\"\n");
    let err = load_err(required(&file), &[], Overrides::default());
    assert_unknown_key(&err, "lantern", &file_origin(&file, 4));
    // Declaring another section does not let it through.
    let err = section_err(with_sections(
        required(&file),
        &[],
        vec![SectionSpec::of::<Demo>()],
    ));
    assert_eq!(err.key(), Some("lantern"));
}

#[test]
fn a_renamed_key_set_in_file_or_env_names_old_and_new_key() {
    let demo = || vec![SectionSpec::of::<Demo>()];
    let file = toml_file("[network]\nmax_per_ip = 4\nmove_rate = 5\n");
    let err = section_err(with_sections(required(&file), &[], demo()));
    assert!(matches!(err, ConfigError::Renamed { .. }), "{err}");
    assert_eq!(err.key(), Some("network.move_rate"));
    assert_eq!(err.origin(), Some(&file_origin(&file, 3)));
    let expected = format!(
        "network.move_rate ({} line 3) moved to demo.move_rate: rename it",
        file.path().display()
    );
    assert_eq!(err.to_string(), expected);

    let env = [("SHARD_NETWORK__MOVE_RATE", "5")];
    let err = section_err(with_sections(ConfigFile::None, &env, demo()));
    assert_eq!(err.key(), Some("network.move_rate"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_NETWORK__MOVE_RATE")));
    let message = err.to_string();
    assert!(
        message.contains("(environment variable SHARD_NETWORK__MOVE_RATE) moved to demo.move_rate"),
        "{message}"
    );
    assert!(message.contains("SHARD_DEMO__MOVE_RATE"), "{message}");

    // An old key from a table the engine no longer has: a rename error, not an unknown key
    // (file) nor an ignored variable (env).
    let file = toml_file("[legacy]\nglow = true\n");
    let err = section_err(with_sections(required(&file), &[], demo()));
    assert!(matches!(err, ConfigError::Renamed { .. }), "{err}");
    assert!(err.to_string().contains("moved to demo.glow"), "{err}");
    let env = [("SHARD_LEGACY__GLOW", "true")];
    let err = section_err(with_sections(ConfigFile::None, &env, demo()));
    assert_eq!(err.key(), Some("legacy.glow"));
    assert_eq!(err.origin(), Some(&env_origin("SHARD_LEGACY__GLOW")));

    // Only the built-in defaults set the old key, and the new one is set: fine.
    let env = [("SHARD_DEMO__MOVE_RATE", "3")];
    let loaded = with_sections(ConfigFile::None, &env, demo()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.config.section::<Demo>().move_rate, 3);
}

#[test]
fn section_names_that_collide_or_cannot_be_variables_are_refused() {
    let cases = [
        (
            vec![SectionSpec::of::<Clash>()],
            "network",
            SectionFault::EngineSection,
        ),
        (
            vec![SectionSpec::of::<Lantern>(), SectionSpec::of::<Lantern>()],
            "lantern",
            SectionFault::DeclaredTwice,
        ),
        (
            vec![SectionSpec::of::<BadName>()],
            "lan__tern",
            SectionFault::BadName,
        ),
    ];
    for (sections, name, fault) in cases {
        let err = section_err(with_sections(ConfigFile::None, &[], sections));
        match &err {
            ConfigError::Section { name: n, fault: f } => {
                assert_eq!((n.as_str(), f), (name, &fault), "{err}");
            }
            other => panic!("expected a section error, got {other}"),
        }
        assert!(err.to_string().contains(name), "{err}");
    }
    assert_eq!(SectionSpec::of::<Lantern>().name(), "lantern");
    let debug = format!("{:?}", SectionSpec::of::<Lantern>());
    assert!(
        debug.contains("lantern") && debug.contains("Lantern"),
        "{debug}"
    );
}

#[test]
fn report_lists_section_keys_after_the_engine_keys() {
    let file = toml_file("[server]\ntick = \"4ms\"\n\n[lantern]\ntoken = \"abc\"\n");
    let env = [("SHARD_LANTERN__RADIUS", "7"), ("SHARD_LANTERN_PORT", "1")];
    let loaded = with_lantern(required(&file), &env).unwrap_or_else(|e| panic!("{e}"));
    let report = loaded.report();
    let line = |key: &str| {
        report
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no line for {key} in\n{report}"))
            .to_owned()
    };
    let token = line("lantern.token");
    assert!(token.starts_with("lantern.token = \"abc\"   "), "{report}");
    let from_file = format!("({} line 5)", file.path().display());
    assert!(token.ends_with(&from_file), "{report}");
    assert!(
        line("lantern.radius").ends_with("(environment variable SHARD_LANTERN__RADIUS)"),
        "{report}"
    );
    assert!(line("lantern.port").ends_with("(default)"), "{report}");
    let keys: Vec<&str> = report
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let first_section_key = keys
        .iter()
        .position(|k| k.starts_with("lantern."))
        .expect("lantern keys");
    assert_eq!(
        &keys[first_section_key..],
        ["lantern.port", "lantern.radius", "lantern.token"]
    );
    assert!(
        keys[first_section_key - 1].starts_with("metrics."),
        "{report}"
    );
    assert_eq!(keys.len(), loaded.entries().len());

    // The warning names the declared section beside the engine's, and hints at it.
    let warning = loaded.ignored_env_warning().expect("a warning");
    assert!(warning.contains("time, metrics, lantern is)"), "{warning}");
    assert!(
        warning.contains("SHARD_LANTERN_PORT (did you mean SHARD_LANTERN__PORT?)"),
        "{warning}"
    );
}
