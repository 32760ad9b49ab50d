//! Settings layers through the real process environment: defaults, the TOML file, `NORMA_*`
//! variables, then flags. These tests set environment variables (figment's `Jail`), so they
//! live in their own test binary: in the library's test binary a `setenv` here raced `getenv`
//! calls of other tests on other threads (libc's environment is not thread-safe) and crashed it.
//! `Jail` serialises the tests of this binary among themselves.
#![allow(clippy::result_large_err)] // figment::Jail's closure error type

use norma::config::*;
use secrecy::SecretString;
use std::path::{Path, PathBuf};

#[test]
fn layers_apply_in_order_file_then_env_then_flags() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "norma.toml",
            "bind = \"127.0.0.1:9000\"\nmax_body_bytes = 4096\n[auth]\nissuer = \"from-file\"\n",
        )?;
        jail.set_env("NORMA_MAX_BODY_BYTES", "8192");
        jail.set_env("NORMA_AUTH__AUDIENCE", "from-env");
        jail.set_env("NORMA_LIMITS__QUEUED_PROMPTS_PER_SESSION", "3");
        let overrides = Overrides {
            bind: Some("127.0.0.1:9100".parse().unwrap()),
            ..Overrides::default()
        };
        let settings = Settings::load(Some(Path::new("norma.toml")), &overrides).unwrap();
        assert_eq!(settings.bind.port(), 9100, "flag beats file");
        assert_eq!(settings.max_body_bytes, 8192, "env beats file");
        assert_eq!(settings.auth.issuer, "from-file");
        assert_eq!(settings.auth.audience, "from-env");
        assert_eq!(settings.limits.queued_prompts_per_session, 3);
        assert_eq!(
            settings.limits.concurrent_runs, 64,
            "other limits keep defaults"
        );
        Ok(())
    });
}

#[test]
fn unknown_keys_and_bad_values_are_errors() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("bad.toml", "bnid = \"x\"\n")?;
        let error = Settings::load(Some(Path::new("bad.toml")), &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("bnid"), "{error}");
        jail.set_env("NORMA_DATABASE_MAX_CONNECTIONS", "0");
        assert!(Settings::load(None, &Overrides::default()).is_err());
        Ok(())
    });
}

#[test]
fn snapshot_storage_needs_a_bucket_paired_keys_and_allowed_http() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("NORMA_WORKSPACE__STORAGE", "snapshot");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("bucket is not set"), "{error}");
        jail.set_env("NORMA_WORKSPACE__SNAPSHOT__BUCKET", "norma");
        jail.set_env(
            "NORMA_WORKSPACE__SNAPSHOT__ENDPOINT",
            "http://127.0.0.1:9000",
        );
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("allow_http"), "{error}");
        jail.set_env("NORMA_WORKSPACE__SNAPSHOT__ALLOW_HTTP", "true");
        jail.set_env("NORMA_WORKSPACE__SNAPSHOT__ACCESS_KEY_ID", "key-id");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("go together"), "{error}");
        jail.set_env(
            "NORMA_WORKSPACE__SNAPSHOT__SECRET_ACCESS_KEY",
            "very-secret",
        );
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert_eq!(settings.workspace.storage, WorkspaceStorage::Snapshot);
        assert_eq!(
            settings.workspace.files_root(&settings.data_dir).unwrap(),
            settings.data_dir
        );
        let shown = format!("{settings:?}");
        assert!(!shown.contains("very-secret"), "{shown}");
        Ok(())
    });
}

#[test]
fn workspace_storage_is_a_named_choice_and_shared_needs_an_absolute_root() {
    figment::Jail::expect_with(|jail| {
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert_eq!(settings.workspace.storage, WorkspaceStorage::Local);
        jail.set_env("NORMA_WORKSPACE__STORAGE", "shared");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("shared_root is not set"), "{error}");
        jail.set_env("NORMA_WORKSPACE__SHARED_ROOT", "relative/dir");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("absolute"), "{error}");
        jail.set_env("NORMA_WORKSPACE__SHARED_ROOT", "/mnt/shared");
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert_eq!(
            settings.workspace.files_root(&settings.data_dir).unwrap(),
            PathBuf::from("/mnt/shared")
        );
        jail.set_env("NORMA_WORKSPACE__STORAGE", "local");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("storage is `local`"), "{error}");
        jail.set_env("NORMA_WORKSPACE__STORAGE", "snapshot");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("shared_root"), "{error}");
        Ok(())
    });
}

#[test]
fn kubernetes_client_and_harness_variables_are_ignored_and_typos_are_not() {
    figment::Jail::expect_with(|jail| {
        for (key, value) in [
            ("NORMA_SERVICE_HOST", "10.0.0.7"),
            ("NORMA_SERVICE_PORT", "80"),
            ("NORMA_SERVICE_PORT_HTTP", "80"),
            ("NORMA_PORT", "tcp://10.0.0.7:80"),
            ("NORMA_PORT_8080_TCP", "tcp://10.0.0.7:8080"),
            ("NORMA_PORT_8080_TCP_PROTO", "tcp"),
            ("NORMA_PORT_8080_TCP_PORT", "8080"),
            ("NORMA_PORT_8080_TCP_ADDR", "10.0.0.7"),
            ("NORMA_DB_SERVICE_HOST", "10.0.0.8"),
            ("NORMA_DB_PORT_5432_TCP", "tcp://10.0.0.8:5432"),
            ("NORMA_URL", "http://norma"),
            ("NORMA_TOKEN", "eyJ-not-a-setting"),
            ("NORMA_TEST_PG_URL", "postgres://x"),
            ("NORMA_BENCH_PG", "1"),
            ("NORMA_MAX_BODY_BYTES", "4096"),
        ] {
            jail.set_env(key, value);
        }
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert_eq!(settings.max_body_bytes, 4096, "real settings still apply");
        let ignored = ignored_environment();
        assert!(ignored.contains(&"NORMA_PORT_8080_TCP_ADDR".to_owned()));
        assert!(ignored.contains(&"NORMA_TOKEN".to_owned()));
        assert!(!ignored.contains(&"NORMA_MAX_BODY_BYTES".to_owned()));

        jail.set_env("NORMA_DATABSE_URL", "postgres://typo");
        let error = Settings::load(None, &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(error.contains("NORMA_DATABSE_URL"), "{error}");
        Ok(())
    });
    for not_ignored in [
        "DATABSE_URL",
        "PORT_HTTP",
        "PORT_80_HTTP",
        "PORT_80_TCP_HOST",
        "SERVICE",
        "AUTH__SERVICE_HOST",
        "TESTING",
    ] {
        assert!(!ignored_env_suffix(not_ignored), "{not_ignored}");
    }
}

#[test]
fn metrics_never_share_the_public_listener() {
    let mut settings = Settings {
        bind: "0.0.0.0:8080".parse().unwrap(),
        dev: true,
        ..Settings::default()
    };
    for overlapping in ["127.0.0.1:8080", "0.0.0.0:8080"] {
        settings.metrics_bind = Some(overlapping.parse().unwrap());
        let error = settings.check_serving().unwrap_err().to_string();
        assert!(error.contains("metrics_bind"), "{error}");
    }
    settings.metrics_bind = Some("127.0.0.1:9464".parse().unwrap());
    settings.check_serving().unwrap();
    figment::Jail::expect_with(|jail| {
        jail.set_env("NORMA_METRICS_BIND", "10.0.0.5:9464");
        jail.set_env("NORMA_TELEMETRY__CAPTURE_CONTENT", "true");
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert_eq!(
            settings.metrics_bind,
            Some("10.0.0.5:9464".parse().unwrap())
        );
        assert!(settings.telemetry.capture_content);
        Ok(())
    });
    assert_eq!(Settings::default().metrics_bind, None, "off by default");
}

#[test]
fn session_scripts_are_allowed_in_development_mode_or_when_set() {
    let mut settings = Settings::default();
    assert!(settings.session_scripts_allowed(), "development mode");
    settings.auth.hs256_secret = Some(SecretString::from("k".repeat(32)));
    assert!(!settings.session_scripts_allowed());
    settings.allow_session_scripts = true;
    assert!(settings.session_scripts_allowed());
    figment::Jail::expect_with(|jail| {
        jail.set_env("NORMA_ALLOW_SESSION_SCRIPTS", "true");
        jail.set_env("NORMA_DEV", "true");
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert!(settings.allow_session_scripts && settings.dev);
        Ok(())
    });
}

#[test]
fn sandbox_require_and_disable_come_from_file_or_env() {
    use norma::sandbox::SandboxPart;
    figment::Jail::expect_with(|jail| {
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert_eq!(settings.sandbox.require, SandboxPart::ALL.to_vec());
        jail.create_file(
            "norma.toml",
            "[sandbox]\nrequire = [\"filesystem\", \"network\"]\n",
        )?;
        let settings =
            Settings::load(Some(Path::new("norma.toml")), &Overrides::default()).unwrap();
        assert_eq!(
            settings.sandbox.require,
            vec![SandboxPart::Filesystem, SandboxPart::Network]
        );
        assert_eq!(
            settings.config_file.as_deref(),
            Some(Path::new("norma.toml"))
        );
        jail.set_env("NORMA_SANDBOX__REQUIRE", "[]");
        jail.set_env("NORMA_SANDBOX__DISABLE", "[mount, pid]");
        let settings = Settings::load(None, &Overrides::default()).unwrap();
        assert!(settings.sandbox.require.is_empty());
        assert_eq!(
            settings.sandbox.disable,
            vec![SandboxPart::Mount, SandboxPart::Pid]
        );
        jail.set_env("NORMA_SANDBOX__DISABLE", "[env]");
        let error = Settings::load(None, &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("env"), "{error}");
        jail.set_env("NORMA_SANDBOX__DISABLE", "[bogus]");
        assert!(Settings::load(None, &Overrides::default()).is_err());
        Ok(())
    });
}

#[test]
fn the_removed_sandbox_private_list_is_refused_naming_its_replacement() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("NORMA_SANDBOX__EGRESS_ALLOW_PRIVATE", "[\"10.0.0.0/8\"]");
        let error = Settings::load(None, &Overrides::default()).unwrap_err();
        assert!(
            error.to_string().contains("egress.allow_private_cidrs"),
            "{error}"
        );
        jail.clear_env();
        jail.create_file(
            "norma.toml",
            "[sandbox]\negress_allow_private = []\n[egress]\nallow_private_cidrs = [\"10.0.0.0/8\"]\n",
        )?;
        let error =
            Settings::load(Some(Path::new("norma.toml")), &Overrides::default()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("NORMA_EGRESS__ALLOW_PRIVATE_CIDRS"),
            "{error}"
        );
        jail.create_file(
            "norma.toml",
            "[egress]\nallow_private_cidrs = [\"10.0.0.0/8\"]\n",
        )?;
        let settings =
            Settings::load(Some(Path::new("norma.toml")), &Overrides::default()).unwrap();
        assert_eq!(settings.egress.allow_private_cidrs.len(), 1);
        Ok(())
    });
}
