//! Configuration files: one TOML file per role (`relay.toml`, `proxy.toml`), validated
//! completely at start.
//!
//! `polycorn config example relay|proxy` prints a commented example ([`RelayConfig::example`],
//! [`ProxyConfig::example`]); every key below appears there with its default.
//!
//! # Errors
//!
//! A bad file stops the process before anything is bound or installed, with one message that
//! names the file and the key:
//!
//! ```text
//! relay.toml: path[1].device: duplicate device "path0" (also used by path[0])
//! relay.toml:7:15: relay.hold_time_s: invalid type: string "30", expected u64
//! relay.toml:3:1: relay.shceduler: unknown field `shceduler`, expected one of `mode`, …
//! ```
//!
//! Messages from the TOML parser (syntax and type errors, unknown keys, missing keys) carry
//! `line:column`; checks made after parsing (ranges, duplicates, files) carry the key only.
//! Every table rejects unknown keys, so a typo is an error rather than a silently ignored
//! setting.
//!
//! # Files
//!
//! Relative file paths (`[tls]`, `context.replay`) are resolved against the directory of the
//! configuration file, not the working directory, so a unit file can start the process from
//! anywhere. Files in `[tls]` must exist when the configuration is loaded.
//!
//! # Naming
//!
//! The TOML array of tables is `[[path]]` (one entry reads naturally as "a path"); in Rust it
//! is [`RelayConfig::paths`].

mod common;
mod error;
mod examples;
mod parse;
mod proxy;
pub mod reference;
mod relay;
mod validate;

pub use common::*;
pub use error::*;
pub use proxy::*;
pub use relay::*;

#[cfg(test)]
mod tests {
    use super::parse::parse;
    use super::*;

    /// A configuration written with `to_toml` reads back as it was: the same key names, and
    /// every value in a form the parser takes.
    #[test]
    fn the_example_configurations_survive_a_round_trip_through_toml() {
        let relay = RelayConfig::example_settings();
        let text = relay.to_toml();
        let back: RelayConfig = parse(&text, "relay.toml written back").expect(&text);
        assert_eq!(back, relay, "{text}");
        let proxy = ProxyConfig::example_settings();
        let text = proxy.to_toml();
        let back: ProxyConfig = parse(&text, "proxy.toml written back").expect(&text);
        assert_eq!(back, proxy, "{text}");
    }

    /// Settings the examples leave out (several listen addresses, per-path proxies and
    /// sources, optional sections) are written back too.
    #[test]
    fn settings_beyond_the_examples_survive_a_round_trip_through_toml() {
        let mut relay = RelayConfig::example_settings();
        relay.paths[0].proxy = Some("proxy.example.net:7701".parse().unwrap());
        relay.paths[0].source = Some("10.0.0.2".parse().unwrap());
        relay.paths[0].mtu = Some(1400);
        relay.relay.congestion = Some("bbr".into());
        relay.relay.slow_start_after_idle = Some(false);
        relay.linkdb.track_origin = Some([52.5, 13.25]);
        relay.dns.listen = Some("127.0.0.1:5353".parse().unwrap());
        let text = relay.to_toml();
        let back: RelayConfig = parse(&text, "relay.toml written back").expect(&text);
        assert_eq!(back, relay, "{text}");
        let mut proxy = ProxyConfig::example_settings();
        proxy.proxy.listen = vec![
            "0.0.0.0:7700".parse().unwrap(),
            "[::]:7700".parse().unwrap(),
        ];
        proxy.proxy.tunnel_peers = vec!["10.0.0.0/8".parse().unwrap()];
        proxy.policy.deny = vec!["192.0.2.0/24".parse().unwrap()];
        proxy.proxy.revoked_relays = vec!["train-7".into()];
        let text = proxy.to_toml();
        let back: ProxyConfig = parse(&text, "proxy.toml written back").expect(&text);
        assert_eq!(back, proxy, "{text}");
    }

    /// The minimal configurations built in Rust are what the minimal files read as.
    #[test]
    fn new_configurations_read_as_their_minimal_files() {
        let relay = RelayConfig::from_toml("[relay]\nproxy = \"10.0.0.1:7700\"\n", "relay.toml");
        assert_eq!(
            relay.unwrap(),
            RelayConfig::new("10.0.0.1:7700".parse().unwrap())
        );
        let proxy = ProxyConfig::from_toml(
            "[tls]\nca = \"ca.pem\"\ncert = \"proxy.pem\"\nkey = \"proxy.key\"\n",
            "proxy.toml",
        );
        assert_eq!(
            proxy.unwrap(),
            ProxyConfig::new(TlsFiles::new("ca.pem", "proxy.pem", "proxy.key"))
        );
        let text = "\n[linkdb]\ndb = \"sqlite:x.db\"\ncarriers = [\"A\", \"B\", \"C\"]\n";
        let linkdb = LinkDbConfig::from_toml(text, "linkdb").unwrap();
        assert_eq!(linkdb.db.as_deref(), Some("sqlite:x.db"));
        assert_eq!(linkdb.carriers.len(), 3);
        assert_eq!(linkdb.model, "paper");
        assert!(LinkDbConfig::from_toml("[relay]\n", "linkdb").is_err());
    }
}
