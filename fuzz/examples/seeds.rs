//! Writes the seed corpus of every fuzz target into `fuzz/corpus/<target>/`: valid inputs built
//! with the crates' own encoders and examples, a few of each kind.
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use polycorn_fuzz::session::{
    encode, flags, CseqSel, DstSel, Dt, FlowSel, FrameSpec, HelloSpec, LenSel, OffSel, Op, SeqSel,
};
use polycorn_net::config::{ProxyConfig, RelayConfig};
use polycorn_proto::{
    CellInfo, CloseReason, ContextInfo, Destination, Frame, OpenStatus, ResetReason, Role,
    SESSION_PATH, VERSION,
};

fn dir(target: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&d).expect("corpus directory");
    d
}

fn write(target: &str, name: &str, bytes: impl AsRef<[u8]>) {
    std::fs::write(dir(target).join(name), bytes).expect("seed file");
}

fn frames() -> Vec<(&'static str, Frame<'static>)> {
    let ctx = ContextInfo {
        unix_ms: 1_700_000_000_000,
        lat: 39.9,
        lon: 116.4,
        speed_mps: 83.3,
        heading_deg: 160.0,
        cells: vec![
            CellInfo {
                path: 0,
                cell: Some(4711),
                rsrp_dbm: Some(-95.5),
            },
            CellInfo {
                path: 1,
                cell: None,
                rsrp_dbm: None,
            },
        ],
    };
    vec![
        (
            "hello_relay",
            Frame::Hello {
                version: VERSION,
                role: Role::Relay,
                session: 0x1234,
                path: 1,
                epoch: 99,
                name: Some("modem-b".into()),
            },
        ),
        (
            "hello_proxy_v2",
            Frame::Hello {
                version: 2,
                role: Role::Proxy,
                session: 0x1234,
                path: 0,
                epoch: 7,
                name: None,
            },
        ),
        (
            "open_flow_v4",
            Frame::OpenFlow {
                cseq: 0,
                flow: 1,
                user: IpAddr::from([10, 0, 1, 5]),
                dst: Destination::Addr(SocketAddr::from(([192, 0, 2, 1], 443))),
            },
        ),
        (
            "open_flow_name",
            Frame::OpenFlow {
                cseq: 1,
                flow: 2,
                user: "fd00::5".parse().expect("address"),
                dst: Destination::Name("example.com".into(), 80),
            },
        ),
        (
            "open_result",
            Frame::OpenResult {
                cseq: 0,
                flow: 1,
                status: OpenStatus::Refused,
            },
        ),
        (
            "data",
            Frame::Data {
                flow: 1,
                offset: 0,
                fin: false,
                data: b"GET / HTTP/1.1\r\n\r\n",
            },
        ),
        (
            "data_fin",
            Frame::Data {
                flow: 1,
                offset: 18,
                fin: true,
                data: b"",
            },
        ),
        (
            "reset",
            Frame::Reset {
                cseq: 2,
                flow: 1,
                reason: ResetReason::PeerReset,
            },
        ),
        ("ack", Frame::Ack { flow: 1, next: 19 }),
        (
            "credit",
            Frame::Credit {
                flow: 1,
                limit: 1 << 20,
            },
        ),
        ("context", Frame::Context(ctx)),
        (
            "ping",
            Frame::Ping {
                id: 3,
                sent_us: 1_000_000,
            },
        ),
        (
            "pong",
            Frame::Pong {
                id: 3,
                ping_sent_us: 1_000_000,
                received_us: 1_020_000,
            },
        ),
        ("path_status", Frame::PathStatus { path: 1, up: false }),
        (
            "drain",
            Frame::PathStatus {
                path: SESSION_PATH,
                up: false,
            },
        ),
        ("ctrl_ack", Frame::CtrlAck { next: 3 }),
        (
            "close",
            Frame::Close {
                reason: CloseReason::Shutdown,
                message: "proxy stopping".into(),
            },
        ),
        (
            "refresh",
            Frame::Refresh {
                path: 0,
                ssthresh: 7,
            },
        ),
    ]
}

fn frame_decode() {
    let mut stream = Vec::new();
    for (name, f) in frames() {
        let bytes = f.to_vec();
        stream.extend_from_slice(&bytes);
        write("frame_decode", name, bytes);
    }
    write("frame_decode", "stream_of_all", stream);
}

fn session() {
    let open = |flow| FrameSpec::OpenFlow {
        cseq: CseqSel::Next,
        flow,
        user: 5,
        dst: DstSel {
            tag: 0,
            a: 1,
            port: 443,
        },
    };
    let data = |flow, off, fin, n| FrameSpec::Data {
        flow,
        off,
        fin,
        len: LenSel::bytes(n),
    };
    let frame = |path, ms, frame| Op::Frame {
        path,
        dt: Dt::ms(ms),
        frame,
    };
    let first = FlowSel::Known(0);

    // A relay opens a flow, sends a request and its FIN; the proxy accepts, answers, and the
    // relay acknowledges everything.
    let request = vec![
        frame(0, 1, open(FlowSel::New)),
        Op::Answer {
            idx: 0,
            how: 0,
            dst: DstSel {
                tag: 0,
                a: 0,
                port: 0,
            },
        },
        frame(0, 2, data(first, OffSel::Next, false, 1200)),
        frame(1, 0, data(first, OffSel::Next, true, 300)),
        Op::Read {
            flow: first,
            len: 4096,
        },
        Op::Read {
            flow: first,
            len: 4096,
        },
        Op::TcpInfo {
            path: 0,
            srtt_ms: 10,
            cwnd_kib: 64,
            unacked_kib: 0,
            backoff: 0,
            rate: 20,
        },
        Op::Send {
            flow: first,
            len: LenSel::bytes(20_000),
            fin: true,
        },
        Op::Advance(Dt::ms(20)),
        frame(
            0,
            20,
            FrameSpec::Ack {
                flow: first,
                next: SeqSel::BasePlusOne,
            },
        ),
        frame(0, 0, FrameSpec::CtrlAck { next: SeqSel::Base }),
        frame(
            1,
            200,
            FrameSpec::Pong {
                answer: true,
                id: 0,
                ping_sent_us: 0,
                received_us: 1_700_000_000_100_000,
            },
        ),
        Op::Timer,
        Op::Timer,
    ];
    write(
        "session",
        "proxy_request",
        encode(flags::WALL_CLOCK, &request),
    );

    // Several flows with the shell accepting and reading at once; data out of order, repeated
    // and overlapping; a second subflow; probes; the relay closes and a new one comes.
    let busy = vec![
        frame(0, 1, open(FlowSel::New)),
        frame(1, 0, open(FlowSel::New)),
        frame(0, 0, data(FlowSel::Small(2), OffSel::Gap(100), false, 500)),
        frame(1, 1, data(FlowSel::Small(2), OffSel::Raw32(0), false, 700)),
        frame(0, 0, data(FlowSel::Small(1), OffSel::Next, false, u16::MAX)),
        frame(
            0,
            0,
            data(FlowSel::Small(1), OffSel::Back(1000), false, 2000),
        ),
        frame(
            0,
            5,
            FrameSpec::Reset {
                cseq: CseqSel::Next,
                flow: FlowSel::Small(2),
                reason: 0,
            },
        ),
        frame(
            1,
            5,
            FrameSpec::Ping {
                id: 1,
                sent_us: SeqSel::Behind(3),
            },
        ),
        frame(
            0,
            5,
            FrameSpec::Context {
                unix_ms: 1_700_000_000_000,
                lat: 40_000,
                lon: 50_000,
                speed: 8_000,
                heading: 9_000,
                cells: 2,
                seed: 12,
            },
        ),
        frame(0, 5, FrameSpec::PathStatus { path: 1, up: 0 }),
        Op::Advance(Dt::ms(1_600)),
        frame(1, 0, FrameSpec::Close { reason: 0, len: 20 }),
        Op::Connect {
            path: 0,
            hello: HelloSpec {
                epoch: 1,
                ..HelloSpec::PLAIN
            },
        },
        frame(0, 1, open(FlowSel::New)),
        Op::Detach { path: 0 },
        Op::Advance(Dt::ms(31_000)),
    ];
    write(
        "session",
        "proxy_busy",
        encode(flags::AUTO_ACCEPT | flags::AUTO_READ, &busy),
    );

    // The relay's side: it opens flows, sends, hears the proxy's answers, data and requests.
    let relay = vec![
        Op::Answer {
            idx: 0,
            how: 3,
            dst: DstSel {
                tag: 2,
                a: 11,
                port: 80,
            },
        },
        Op::Send {
            flow: FlowSel::Known(0),
            len: LenSel::bytes(3000),
            fin: false,
        },
        frame(
            0,
            3,
            FrameSpec::OpenResult {
                cseq: CseqSel::Next,
                flow: FlowSel::Known(0),
                status: 0,
            },
        ),
        frame(0, 3, data(FlowSel::Known(0), OffSel::Next, false, 5000)),
        frame(
            1,
            3,
            FrameSpec::Ack {
                flow: FlowSel::Known(0),
                next: SeqSel::Base,
            },
        ),
        frame(
            1,
            3,
            FrameSpec::Credit {
                flow: FlowSel::Known(0),
                limit: SeqSel::Ahead(512),
            },
        ),
        frame(
            0,
            3,
            FrameSpec::Refresh {
                path: 1,
                ssthresh: 5,
            },
        ),
        frame(0, 3, FrameSpec::PathStatus { path: 0, up: 2 }),
        Op::Read {
            flow: FlowSel::Known(0),
            len: 9000,
        },
        Op::Misc { kind: 5, arg: 80 },
        frame(1, 100, FrameSpec::CtrlAck { next: SeqSel::Base }),
        Op::Misc { kind: 2, arg: 0 },
        Op::Connect {
            path: 1,
            hello: HelloSpec {
                epoch: 1,
                ..HelloSpec::PLAIN
            },
        },
    ];
    write("session", "relay", encode(flags::RELAY, &relay));

    // Limits: a burst of opens past 16 flows, resets for many closed ids, control frames far
    // out of order.
    let limits = vec![
        Op::Burst {
            path: 0,
            dt: Dt::ms(1),
            exp: 5,
            plus: 0,
            stride: 1,
            frame: open(FlowSel::New),
        },
        Op::Burst {
            path: 1,
            dt: Dt::ms(1),
            exp: 10,
            plus: 0,
            stride: 1,
            frame: FrameSpec::Reset {
                cseq: CseqSel::Ahead(0),
                flow: FlowSel::Raw(1000),
                reason: 1,
            },
        },
        Op::Burst {
            path: 0,
            dt: Dt::ms(1),
            exp: 6,
            plus: 0,
            stride: 7,
            frame: data(FlowSel::Known(0), OffSel::Raw32(1), false, 3),
        },
    ];
    write(
        "session",
        "limits",
        encode(flags::SMALL_LIMITS | flags::AUTO_ACCEPT, &limits),
    );

    // A relay that stops reading while the proxy has answers and data for it, and time passes.
    let stalled = vec![
        frame(0, 1, open(FlowSel::New)),
        frame(0, 1, open(FlowSel::New)),
        Op::PeerReading { path: 0, on: false },
        Op::PeerReading { path: 1, on: false },
        Op::Send {
            flow: FlowSel::Known(0),
            len: LenSel::bytes(10_000),
            fin: false,
        },
        Op::Advance(Dt::ms(600)),
        Op::Advance(Dt::ms(600)),
        frame(
            1,
            500,
            FrameSpec::Ping {
                id: 9,
                sent_us: SeqSel::Base,
            },
        ),
        Op::Advance(Dt::ms(600)),
        Op::PeerReading { path: 0, on: true },
        Op::Timer,
    ];
    write(
        "session",
        "peer_not_reading",
        encode(flags::AUTO_ACCEPT, &stalled),
    );

    // Raw bytes on a subflow: an encoded stream of frames, as the decoder sees them.
    let mut bytes = Vec::new();
    for (name, f) in frames() {
        if !name.starts_with("hello") && name != "close" {
            f.encode(&mut bytes);
        }
    }
    write(
        "session",
        "raw_frames",
        encode(0, &[Op::Raw { path: 0, bytes }, Op::Timer]),
    );
}

fn socks5() {
    let greet = [5u8, 2, 0, 2];
    let mut v4 = greet.to_vec();
    v4.extend_from_slice(&[5, 1, 0, 1, 192, 0, 2, 1, 1, 187]);
    let mut v6 = greet.to_vec();
    v6.extend_from_slice(&[5, 1, 0, 4]);
    v6.extend_from_slice(
        &"2001:db8::1"
            .parse::<std::net::Ipv6Addr>()
            .expect("v6")
            .octets(),
    );
    v6.extend_from_slice(&[0, 80]);
    let mut name = vec![5u8, 1, 0, 5, 1, 0, 3, 11];
    name.extend_from_slice(b"example.com");
    name.extend_from_slice(&[1, 187]);
    let mut literal = vec![5u8, 1, 0, 5, 1, 0, 3, 9];
    literal.extend_from_slice(b"192.0.2.7");
    literal.extend_from_slice(&[0, 22]);
    let bind = [5u8, 1, 0, 5, 2, 0, 1, 10, 0, 0, 1, 0, 80];
    let no_auth = [5u8, 1, 2];
    // Behaviour byte first: 0 reads everything at once, 1 a byte at a time, 8 + 3 stalls
    // between reads of three bytes, 32 fails at the end instead of EOF.
    for (name_, how, body) in [
        ("connect_v4", 0u8, v4.clone()),
        ("connect_v4_bytewise", 1, v4),
        ("connect_v6_stalling", 8 | 3, v6),
        ("connect_name", 0, name),
        ("connect_ip_literal_name", 2, literal),
        ("bind", 0, bind.to_vec()),
        ("no_acceptable_method", 32, no_auth.to_vec()),
    ] {
        let mut input = vec![how];
        input.extend_from_slice(&body);
        write("socks5", name_, input);
    }
}

fn config() {
    write("config", "relay_example.toml", RelayConfig::example());
    write("config", "proxy_example.toml", ProxyConfig::example());
    write(
        "config",
        "relay_socks5_single.toml",
        r#"[relay]
mode = "single"
proxy = "10.0.2.1:7700"

[[path]]
name = "lte-1"
device = "wwan0"
source = "10.100.0.1"
mtu = 1400

[intercept]
socks5 = "10.0.1.1:1080"

[dns]
listen = "10.0.1.1:53"
upstream = "10.0.2.2:53"

[log]
level = "info,polycorn_net::subflow=debug"
"#,
    );
    write(
        "config",
        "proxy_tunnels.toml",
        r#"[proxy]
listen = ["0.0.0.0:7700", "[::]:7700"]
tunnel_listen = "0.0.0.0:7701"
tunnel_peers = ["10.100.0.0/16"]
scheduler = "hpr,minrtt,tpr,ori+er(k=3)"
revoked_relays = ["train-017"]

[tls]
ca = "ca.pem"
cert = "proxy.pem"
key = "proxy.key"

[policy]
allow = ["0.0.0.0/0", "::/0", "10.0.2.2/32"]
allow_private = true

[linkdb]
db = "sqlite:/var/lib/polycorn/linkdb.sqlite"
model = "risk"
track_origin = [39.86, 116.37]
"#,
    );
}

fn trace() {
    write("trace", "mahimahi.trace", "1\n1\n2\n5\n5\n5\n12\n");
    write("trace", "mahimahi_crlf.trace", "0\r\n3\r\n7\r\n\r\n");
    write(
        "trace",
        "delay.csv",
        "t_ms,delay_ms\n0,20\n1000,35.5\n2000,0.125\n",
    );
    write(
        "trace",
        "outages.csv",
        "start_ms,end_ms\n100,200\n200,450\n900,1000\n",
    );
    write(
        "trace",
        "throughput.csv",
        "Timestamp,Longitude,DL_bitrate,UL_bitrate,PINGAVG,PINGMIN\n\
         2019.12.16_07.22.43,-8.38,1200,300,45,40\n\
         2019.12.16_07.22.43,-8.38,1000,200,-,-\n\
         2019.12.16_07.22.44,-8.38,-,150,50,38.5\n\
         2019.12.16_07.22.52,-8.38,800,100,-,-\n",
    );
}

fn linkdb_import() {
    write(
        "linkdb_import",
        "ucc5g.csv",
        "Timestamp,Longitude,Latitude,Speed,Operatorname,CellID,NetworkMode,RSRP,RAWCELLID\n\
         2019.12.16_07.22.43,-8.38,51.93,36,B,12,LTE,-98,100\n\
         2019.12.16_07.22.44,-8.38,51.93,36,B,12,LTE,-99,100\n\
         2019.12.16_07.22.45,-8.38,51.93,36,B,13,LTE,-90,200\n\
         2019.12.16_07.22.46,-8.38,51.93,36,B,13,LTE,-90,-\n\
         2019.12.16_07.22.48,-8.38,51.93,36,B,13,LTE,-90,300\n",
    );
    write(
        "linkdb_import",
        "wmnlab.csv",
        "Timestamp,lat,long,gpsspeed,LTE_HO,MN_HO,eNB_to_ENDC,gNB_Rel,gNB_HO,RLF,SCG_RLF,num_of_neis,RSRP,RSRQ\n\
         2023-04-17 10:00:00,-,-,-,0,0,0,0,0,0,0,1,-80,-10\n\
         2023-04-17 10:00:01,-,-,-,1,0,0,0,0,0,0,1,-81,-10\n\
         2023-04-17 10:00:40,-,-,-,0,0,0,0,0,1,0,1,-99,-12\n\
         2023-04-17 10:00:41,-,-,-,1,0,0,0,0,0,0,1,-90,-10\n\
         2023-04-17 10:00:44,-,-,-,0,0,0,0,1,0,0,1,-80,-10\n",
    );
    let lat = |m: f64| 39.86 - m / 111_320.0;
    let mut log =
        String::from("t_ms,lat,lon,speed_mps,heading_deg,cell_A,rsrp_dbm_A,cell_B,rsrp_dbm_B\n");
    for (t, a, b) in [
        (0, "1,-90.0", "10,-80.0"),
        (1000, "1,-95.0", "10,-81.0"),
        (2000, "2,-85.0", "10,-82.0"),
        (3000, "2,-100.0", ","),
        (4000, ",", ","),
        (5000, ",", "11,-90.0"),
        (6000, "2,-90.0", "?,"),
        (13000, "3,-90.0", "12,-90.0"),
    ] {
        log += &format!(
            "{t},{:.9},116.37,100.0,160.0,{a},{b}\n",
            lat(t as f64 / 10.0)
        );
    }
    write("linkdb_import", "relay_context.csv", log);
}

/// libFuzzer dictionaries (`fuzz/dict/<target>.dict`): the words a parser looks for, which
/// random mutation rarely spells.
fn dictionaries() {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("dict");
    std::fs::create_dir_all(&d).expect("dict directory");
    // A dictionary entry: printable ASCII as is (quote and backslash escaped), other bytes
    // as \xNN.
    let entry = |w: &str| {
        let mut e = String::from("\"");
        for b in w.bytes() {
            match b {
                b'"' | b'\\' => {
                    e.push('\\');
                    e.push(b as char);
                }
                0x20..=0x7e => e.push(b as char),
                _ => e.push_str(&format!("\\x{b:02X}")),
            }
        }
        e + "\"\n"
    };

    // Config: every table and key of the examples (commented-out ones included), and values.
    let mut words = std::collections::BTreeSet::new();
    for text in [RelayConfig::example(), ProxyConfig::example()] {
        for line in text.lines() {
            let line = line.trim_start_matches('#').trim();
            if line.starts_with('[') && line.ends_with(']') {
                words.insert(line.to_string());
            } else if let Some((key, _)) = line.split_once(" = ") {
                if key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    words.insert(format!("{key} = "));
                }
            }
        }
    }
    for w in [
        "\"polycorn\"",
        "\"mptcp\"",
        "\"single\"",
        "\"gpsd\"",
        "\"replay\"",
        "\"none\"",
        "\"block\"",
        "\"allow\"",
        "\"json\"",
        "\"text\"",
        "\"collapsed\"",
        "\"used\"",
        "\"off\"",
        "\"risk\"",
        "\"loctable\"",
        "\"paper\"",
        "true",
        "false",
        "nan",
        "inf",
        "\"10.0.2.1:7700\"",
        "\"[::1]:7700\"",
        "\"10.0.0.0/8\"",
        "\"proxy.example:7700\"",
        "hrsch",
        "minrtt",
        "redundant",
        "hpr,minrtt,tpr,ori+er(k=3)",
    ] {
        words.insert(w.to_string());
    }
    let dict: String = words.iter().map(|w| entry(w)).collect();
    std::fs::write(d.join("config.dict"), dict).expect("dict");

    let csv = [
        "t_ms",
        "lat",
        "lon",
        "long",
        "speed_mps",
        "heading_deg",
        "cell_",
        "rsrp_dbm_",
        "cell_A",
        "rsrp_dbm_A",
        "Timestamp",
        "Longitude",
        "Latitude",
        "Speed",
        "Operatorname",
        "CellID",
        "NetworkMode",
        "RSRP",
        "RSRQ",
        "RAWCELLID",
        "gpsspeed",
        "LTE_HO",
        "MN_HO",
        "eNB_to_ENDC",
        "gNB_Rel",
        "gNB_HO",
        "RLF",
        "SCG_RLF",
        "num_of_neis",
        "2023-04-17 10:00:00",
        "2019.12.16_07.22.43",
        "?",
        "-",
        ",",
        "\n",
        "\u{feff}",
    ];
    let dict: String = csv.iter().map(|w| entry(w)).collect();
    std::fs::write(d.join("linkdb_import.dict"), dict).expect("dict");

    let trace = [
        "t_ms,delay_ms",
        "start_ms,end_ms",
        "Timestamp",
        "DL_bitrate",
        "UL_bitrate",
        "PINGMIN",
        "PINGAVG",
        "2019.12.16_07.22.43",
        "1099511627776",
        "600000",
        "18446744073709551616",
        "\r\n",
        ",",
        ".",
        "-",
    ];
    let dict: String = trace.iter().map(|w| entry(w)).collect();
    std::fs::write(d.join("trace.dict"), dict).expect("dict");
}

fn main() {
    dictionaries();
    frame_decode();
    session();
    socks5();
    config();
    trace();
    linkdb_import();
    println!(
        "seeds written under {}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .display()
    );
}
