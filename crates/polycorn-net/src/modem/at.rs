//! Serving cell and signal from a modem's AT command port, for gateways without ModemManager
//! (`[context] cells = "at"`; each path's `at_port`). Pure: lines in, readings out.
//!
//! Each poll sends the commands of the module's family and feeds every line of the answers to
//! an [`AtReading`] ([`AtReading::feed`]), which keeps what it understands and ignores the rest:
//! command echo, `OK`/`ERROR`/`+CME ERROR`, unsolicited result codes of other kinds, and
//! garbage. Families and the answers read:
//!
//! * Quectel: `AT+QENG="servingcell"` — `+QENG: "servingcell",<state>,"LTE",…` (LTE and
//!   NR5G-SA in one line; EN-DC as `+QENG: "LTE",…` and `+QENG: "NR5G-NSA",…` lines).
//! * SIMCom: `AT+CPSI?` — `+CPSI: LTE,Online,262-01,0x7D,27447553,123,EUTRAN-BAND3,…`.
//! * Sierra Wireless: `AT!GSTATUS?` — `Key: value` pairs (`System mode`, `RSRP (dBm)`,
//!   `Cell ID`, `TAC`, …).
//! * Telit: `AT#RFSTS` — `#RFSTS: "262 01",<earfcn>,<rsrp>,<rssi>,<rsrq>,<tac>,…,<cid>,…`.
//! * Generic 3GPP (27.007): `AT+CEREG?` (with `AT+CEREG=2`: TAC and cell id), `AT+COPS?`
//!   (access technology), `AT+CESQ` (RSRP and RSRQ indices).

use super::{Location3gpp, Signal, Tech};

/// Longest line kept; longer ones are garbage.
pub const MAX_AT_LINE: usize = 512;

/// A module family: which commands a poll sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtFamily {
    /// Quectel (EC2x, EG2x, EM12, RM5xx, …).
    Quectel,
    /// SIMCom (SIM7600, SIM8200, …).
    Simcom,
    /// Sierra Wireless (EM74xx, EM91xx, …).
    Sierra,
    /// Telit (LE910, LM960, FN980, …).
    Telit,
    /// Any 27.007 module: registration, operator, signal indices.
    Generic,
}

impl AtFamily {
    /// The commands of one poll, in order (each answered by `OK` or an error).
    pub fn commands(self) -> &'static [&'static str] {
        match self {
            AtFamily::Quectel => &["AT+QENG=\"servingcell\"", "AT+CEREG?", "AT+CGACT?"],
            AtFamily::Simcom => &["AT+CPSI?", "AT+CEREG?", "AT+CGACT?"],
            AtFamily::Sierra => &["AT!GSTATUS?", "AT+CEREG=2", "AT+CEREG?", "AT+CGACT?"],
            AtFamily::Telit => &[
                "AT#RFSTS",
                "AT+CEREG=2",
                "AT+CEREG?",
                "AT+COPS?",
                "AT+CGACT?",
            ],
            AtFamily::Generic => &[
                "AT+CEREG=2",
                "AT+CEREG?",
                "AT+COPS=3,2",
                "AT+COPS?",
                "AT+CESQ",
                "AT+CGACT?",
            ],
        }
    }

    /// The family of a `+CGMI`/`ATI` manufacturer string (None: unknown, use [`AtFamily::Generic`]).
    pub fn from_manufacturer(s: &str) -> Option<AtFamily> {
        let s = s.to_ascii_lowercase();
        [
            ("quectel", AtFamily::Quectel),
            ("simcom", AtFamily::Simcom),
            ("sierra", AtFamily::Sierra),
            ("telit", AtFamily::Telit),
        ]
        .into_iter()
        .find(|(k, _)| s.contains(k))
        .map(|(_, f)| f)
    }
}

/// What the final line of a command's answer says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Final {
    /// `OK`.
    Ok,
    /// `ERROR`, `+CME ERROR: …`, `+CMS ERROR: …`, `NO CARRIER`.
    Error(String),
}

/// The final result code a line is, if it is one.
pub fn final_code(line: &str) -> Option<Final> {
    let l = line.trim();
    match l {
        "OK" => Some(Final::Ok),
        "ERROR" | "NO CARRIER" => Some(Final::Error(l.to_string())),
        _ if l.starts_with("+CME ERROR") || l.starts_with("+CMS ERROR") => {
            Some(Final::Error(l.to_string()))
        }
        _ => None,
    }
}

/// What one poll's answers told.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AtReading {
    /// Access technology.
    pub tech: Option<Tech>,
    /// Registered (home or roaming); None: not said.
    pub registered: Option<bool>,
    /// A PDP context is active (`+CGACT`); None: not said.
    pub connected: Option<bool>,
    /// MCC, MNC, TAC, cell id (those known; `ci` 0: none).
    pub location: Option<Location3gpp>,
    /// Physical cell id.
    pub pci: Option<u32>,
    /// Signal.
    pub signal: Signal,
}

fn unquote(s: &str) -> &str {
    s.trim().trim_matches('"').trim()
}

fn hex(s: &str) -> Option<u64> {
    let s = unquote(s);
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 10 {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn dec(s: &str) -> Option<f64> {
    let v: f64 = unquote(s).parse().ok()?;
    v.is_finite().then_some(v)
}

fn digits(s: &str) -> Option<String> {
    let s = unquote(s);
    ((2..=3).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.to_string())
}

fn in_range(v: Option<f64>, lo: f64, hi: f64) -> Option<f64> {
    v.filter(|x| (lo..=hi).contains(x))
}

impl AtReading {
    fn set_cell(
        &mut self,
        mcc: Option<String>,
        mnc: Option<String>,
        tac: Option<u64>,
        ci: Option<u64>,
    ) {
        let loc = self.location.get_or_insert(Location3gpp {
            mcc: String::new(),
            mnc: String::new(),
            lac: 0,
            ci: 0,
            tac: 0,
        });
        if let Some(m) = mcc {
            loc.mcc = m;
        }
        if let Some(m) = mnc {
            loc.mnc = m;
        }
        if let Some(t) = tac.filter(|&t| t <= 0xff_ffff) {
            loc.tac = t as u32;
        }
        if let Some(c) = ci.filter(|&c| c < (1 << 36)) {
            loc.ci = c;
        }
    }

    fn set_signal(
        &mut self,
        rsrp: Option<f64>,
        rsrq: Option<f64>,
        sinr: Option<f64>,
        rssi: Option<f64>,
    ) {
        let s = &mut self.signal;
        if let Some(v) = in_range(rsrp, -160.0, -30.0) {
            s.rsrp_dbm = Some(v);
        }
        if let Some(v) = in_range(rsrq, -40.0, 20.0) {
            s.rsrq_db = Some(v);
        }
        if let Some(v) = in_range(sinr, -30.0, 60.0) {
            s.sinr_db = Some(v);
        }
        if let Some(v) = in_range(rssi, -140.0, 0.0) {
            s.rssi_dbm = Some(v);
        }
    }

    /// Takes in one line of a poll's answers (or an unsolicited one). Lines it does not
    /// understand change nothing.
    pub fn feed(&mut self, line: &str) {
        let line = line.trim();
        if line.len() > MAX_AT_LINE || !line.is_ascii() {
            return;
        }
        if let Some(rest) = line.strip_prefix("+QENG:") {
            self.quectel(rest);
        } else if let Some(rest) = line.strip_prefix("+CPSI:") {
            self.simcom(rest);
        } else if let Some(rest) = line.strip_prefix("#RFSTS:") {
            self.telit(rest);
        } else if let Some(rest) = line.strip_prefix("+CEREG:") {
            self.cereg(rest);
        } else if let Some(rest) = line.strip_prefix("+COPS:") {
            self.cops(rest);
        } else if let Some(rest) = line.strip_prefix("+CESQ:") {
            self.cesq(rest);
        } else if let Some(rest) = line.strip_prefix("+CGACT:") {
            // One line per context: any active one carries data.
            let f: Vec<&str> = rest.split(',').map(str::trim).collect();
            if let [_, state] = f[..] {
                let active = state == "1";
                self.connected = Some(self.connected.unwrap_or(false) || active);
            }
        } else if line.contains(':') {
            self.sierra(line);
        }
    }

    fn quectel(&mut self, rest: &str) {
        let f: Vec<&str> = rest.split(',').map(str::trim).collect();
        let kind = unquote(f[0]);
        match kind {
            "servingcell" => {
                // <state>,"LTE"|"NR5G-SA"|…; EN-DC: the state alone, the rest in the lines after.
                let state = f.get(1).map(|s| unquote(s)).unwrap_or("");
                self.registered = Some(matches!(state, "NOCONN" | "CONNECT"));
                match f.get(2).map(|s| unquote(s)) {
                    Some("LTE") => self.quectel_lte(&f[3..]),
                    Some("NR5G-SA") if f.len() >= 15 => {
                        self.tech = Some(Tech::Nr);
                        // <duplex>,MCC,MNC,cellID,PCID,TAC,ARFCN,band,bw,RSRP,RSRQ,SINR,…
                        self.set_cell(digits(f[4]), digits(f[5]), hex(f[8]), hex(f[6]));
                        self.pci = dec(f[7]).map(|p| p as u32).filter(|&p| p <= 1007);
                        self.set_signal(dec(f[12]), dec(f[13]), dec(f[14]), None);
                    }
                    Some("WCDMA") => self.tech = Some(Tech::Umts),
                    Some("GSM") => self.tech = Some(Tech::Gsm),
                    _ => {}
                }
            }
            "LTE" => self.quectel_lte(&f[1..]),
            "NR5G-NSA" if f.len() >= 7 => {
                // MCC,MNC,PCID,RSRP,SINR,RSRQ,…: the NR leg; the cell id stays the LTE anchor's.
                self.tech = Some(Tech::Nr);
                let (rsrp, sinr, rsrq) = (dec(f[4]), dec(f[5]), dec(f[6]));
                self.set_signal(rsrp, rsrq, sinr, None);
            }
            _ => {}
        }
    }

    /// `<is_tdd>,MCC,MNC,cellID,PCID,earfcn,band,ul_bw,dl_bw,TAC,RSRP,RSRQ,RSSI,SINR,…`.
    fn quectel_lte(&mut self, f: &[&str]) {
        if f.len() < 14 {
            return;
        }
        if self.tech != Some(Tech::Nr) {
            self.tech = Some(Tech::Lte);
        }
        self.set_cell(digits(f[1]), digits(f[2]), hex(f[9]), hex(f[3]));
        self.pci = dec(f[4]).map(|p| p as u32).filter(|&p| p <= 503);
        if self.tech == Some(Tech::Nr) && self.signal.rsrp_dbm.is_some() {
            return;
        }
        self.set_signal(dec(f[10]), dec(f[11]), dec(f[13]), dec(f[12]));
    }

    /// `<mode>,<op mode>,MCC-MNC,TAC,cellID,PCID,band,earfcn,dlbw,ulbw,RSRQ,RSRP,RSSI,RSSNR`
    /// (signal in tenths of dB).
    fn simcom(&mut self, rest: &str) {
        let f: Vec<&str> = rest.split(',').map(str::trim).collect();
        let mode = f[0];
        if mode.eq_ignore_ascii_case("NO SERVICE") {
            self.registered = Some(false);
            return;
        }
        self.tech = match mode {
            "LTE" | "CAT-M" | "NB-IOT" => Some(Tech::Lte),
            m if m.starts_with("NR5G") => Some(Tech::Nr),
            "WCDMA" => Some(Tech::Umts),
            "GSM" => Some(Tech::Gsm),
            _ => return,
        };
        self.registered = Some(f.get(1).is_some_and(|s| *s == "Online"));
        if f.len() < 3 {
            return;
        }
        let (mcc, mnc) = f[2].split_once('-').unwrap_or(("", ""));
        if self.tech == Some(Tech::Lte) && f.len() >= 14 {
            self.set_cell(
                digits(mcc),
                digits(mnc),
                hex(f[3]),
                dec(f[4]).map(|c| c as u64),
            );
            self.pci = dec(f[5]).map(|p| p as u32).filter(|&p| p <= 503);
            let tenth = |s: &str| dec(s).map(|v| v / 10.0);
            self.set_signal(tenth(f[11]), tenth(f[10]), dec(f[13]), tenth(f[12]));
        } else if self.tech == Some(Tech::Nr) && f.len() >= 11 && mode == "NR5G_SA" {
            // NR5G_SA,Online,MCC-MNC,TAC,cellID,PCID,band,arfcn,RSRP,RSRQ,SNR (tenths of dB).
            self.set_cell(
                digits(mcc),
                digits(mnc),
                hex(f[3]),
                dec(f[4]).map(|c| c as u64),
            );
            self.pci = dec(f[5]).map(|p| p as u32).filter(|&p| p <= 1007);
            let tenth = |s: &str| dec(s).map(|v| v / 10.0);
            self.set_signal(tenth(f[8]), tenth(f[9]), tenth(f[10]), None);
        }
    }

    /// `"MCC MNC",EARFCN,RSRP,RSSI,RSRQ,TAC,RAC,TXPWR,DRX,MM,RRC,CID,IMSI,NetName,SD,ABND`.
    fn telit(&mut self, rest: &str) {
        let f: Vec<&str> = rest.split(',').map(str::trim).collect();
        if f.len() < 12 {
            return;
        }
        let plmn = unquote(f[0]);
        let (mcc, mnc) = plmn.split_once(' ').unwrap_or(("", ""));
        self.tech.get_or_insert(Tech::Lte);
        self.set_cell(digits(mcc), digits(mnc), hex(f[5]), hex(f[11]));
        self.set_signal(dec(f[2]), dec(f[4]), None, dec(f[3]));
    }

    /// `+CEREG: <n>,<stat>[,<tac>,<ci>[,<AcT>]]` (answer) or `+CEREG: <stat>[,<tac>,<ci>…]`
    /// (unsolicited).
    fn cereg(&mut self, rest: &str) {
        let f: Vec<&str> = rest.split(',').map(str::trim).collect();
        // The answer to `AT+CEREG?` starts with <n>: two numbers, or a quoted TAC third.
        let answer = f.len() == 2 && !f[1].starts_with('"')
            || f.len() >= 3 && !f[1].starts_with('"') && f[2].starts_with('"');
        let at = usize::from(answer);
        let Some(stat) = f.get(at).and_then(|s| dec(s)) else {
            return;
        };
        self.registered = Some(stat == 1.0 || stat == 5.0);
        if let (Some(tac), Some(ci)) = (f.get(at + 1), f.get(at + 2)) {
            if stat == 1.0 || stat == 5.0 {
                self.set_cell(None, None, hex(tac), hex(ci));
            }
        }
        if let Some(act) = f.get(at + 3).and_then(|s| dec(s)) {
            if let Some(t) = act_tech(act as u32) {
                self.tech = Some(t);
            }
        }
    }

    /// `+COPS: <mode>[,<format>,<oper>[,<AcT>]]`; with format 2 the operator is `MCCMNC`.
    fn cops(&mut self, rest: &str) {
        let f: Vec<&str> = rest.split(',').map(str::trim).collect();
        if f.len() >= 3 && unquote(f[1]) == "2" {
            let op = unquote(f[2]);
            if (5..=6).contains(&op.len()) && op.bytes().all(|b| b.is_ascii_digit()) {
                self.set_cell(
                    Some(op[..3].to_string()),
                    Some(op[3..].to_string()),
                    None,
                    None,
                );
            }
        }
        if let Some(t) = f
            .get(3)
            .and_then(|s| dec(s))
            .and_then(|a| act_tech(a as u32))
        {
            self.tech = Some(t);
        }
    }

    /// `+CESQ: <rxlev>,<ber>,<rscp>,<ecno>,<rsrq>,<rsrp>` (indices; 255: unknown).
    fn cesq(&mut self, rest: &str) {
        let f: Vec<&str> = rest.split(',').map(str::trim).collect();
        if f.len() != 6 {
            return;
        }
        let rsrq = dec(f[4]).filter(|&v| v <= 34.0).map(|v| -20.0 + v * 0.5);
        let rsrp = dec(f[5]).filter(|&v| v <= 97.0).map(|v| v - 141.0);
        self.set_signal(rsrp, rsrq, None, None);
    }

    /// One `Key: value` line of Sierra's `!GSTATUS?` (two pairs may share a line, split by
    /// tabs or runs of spaces).
    fn sierra(&mut self, line: &str) {
        // "System mode:     LTE     PS state:  Attached" → segments → pairs.
        let segments: Vec<&str> = line
            .split('\t')
            .flat_map(|p| p.split("  "))
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .collect();
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        let mut i = 0;
        while i < segments.len() && pairs.len() < 4 {
            if let Some((k, v)) = segments[i].split_once(':') {
                let v = v.trim();
                if v.is_empty() {
                    if let Some(next) = segments.get(i + 1).filter(|n| !n.contains(':')) {
                        pairs.push((k.trim(), next));
                        i += 1;
                    }
                } else {
                    pairs.push((k.trim(), v));
                }
            }
            i += 1;
        }
        for (k, v) in pairs {
            let first = v.split_whitespace().next().unwrap_or("");
            match k {
                "System mode" => {
                    self.tech = match first {
                        "LTE" => Some(Tech::Lte),
                        "ENDC" | "NR5G" | "5G" => Some(Tech::Nr),
                        "WCDMA" | "UMTS" => Some(Tech::Umts),
                        "GSM" => Some(Tech::Gsm),
                        _ => self.tech,
                    }
                }
                "PS state" => self.registered = Some(first == "Attached"),
                "RSRP (dBm)" => self.set_signal(dec(first), None, None, None),
                "RSRQ (dB)" => self.set_signal(None, dec(first), None, None),
                "SINR (dB)" => self.set_signal(None, None, dec(first), None),
                "RSSI (dBm)" => self.set_signal(None, None, None, dec(first)),
                "Cell ID" => self.set_cell(None, None, None, hex(first)),
                "TAC" => self.set_cell(None, None, hex(first), None),
                _ => {}
            }
        }
    }
}

impl AtReading {
    /// The path's radio from one poll; `port` names the modem.
    pub fn radio(&self, path: u8, port: &str) -> super::Radio {
        super::Radio {
            path,
            modem: Some(port.to_string()),
            tech: self.tech,
            registered: self.registered.unwrap_or(false),
            // A module that does not answer `+CGACT?` is taken as connected while registered.
            connected: self.connected.unwrap_or(true),
            location: self.location.clone(),
            pci: self.pci,
            signal: self.signal,
        }
    }
}

/// 27.007 `<AcT>` to a technology.
fn act_tech(act: u32) -> Option<Tech> {
    match act {
        0 | 1 | 3 | 8 => Some(Tech::Gsm),
        2 | 4..=6 => Some(Tech::Umts),
        7 | 9 | 10 => Some(Tech::Lte),
        11..=13 => Some(Tech::Nr),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read(lines: &[&str]) -> AtReading {
        let mut r = AtReading::default();
        for l in lines {
            r.feed(l);
        }
        r
    }

    #[test]
    fn quectel_lte_and_nr() {
        let r = read(&[
            "AT+QENG=\"servingcell\"",
            "+QENG: \"servingcell\",\"NOCONN\",\"LTE\",\"FDD\",262,01,1A2B3C4,123,1300,3,5,5,7D,-95,-11,-65,12,5,-,40",
            "",
            "RING",
            "OK",
        ]);
        assert_eq!(r.tech, Some(Tech::Lte));
        assert_eq!(r.registered, Some(true));
        let l = r.location.unwrap();
        assert_eq!(
            (l.mcc.as_str(), l.mnc.as_str(), l.tac, l.ci),
            ("262", "01", 0x7D, 0x1A2B3C4)
        );
        assert_eq!(r.pci, Some(123));
        assert_eq!(r.signal.rsrp_dbm, Some(-95.0));
        assert_eq!(r.signal.rsrq_db, Some(-11.0));
        assert_eq!(r.signal.rssi_dbm, Some(-65.0));
        assert_eq!(r.signal.sinr_db, Some(12.0));
        let sa = read(&["+QENG: \"servingcell\",\"NOCONN\",\"NR5G-SA\",\"TDD\",262,01,4F5A8D001,501,7D0,636666,78,12,-88,-10,15,1,-"]);
        assert_eq!(sa.tech, Some(Tech::Nr));
        assert_eq!(sa.location.unwrap().ci, 0x4F5A8D001);
        assert_eq!(sa.pci, Some(501));
        assert_eq!(sa.signal.rsrp_dbm, Some(-88.0));
        let nsa = read(&[
            "+QENG: \"servingcell\",\"NOCONN\"",
            "+QENG: \"LTE\",\"FDD\",262,01,1A2B3C4,123,1300,3,5,5,7D,-95,-11,-65,12,5,-,40",
            "+QENG: \"NR5G-NSA\",262,01,501,-85,20,-9,636666,78,12,1",
        ]);
        assert_eq!(nsa.tech, Some(Tech::Nr));
        assert_eq!(nsa.location.unwrap().ci, 0x1A2B3C4);
        assert_eq!(nsa.signal.rsrp_dbm, Some(-85.0));
        let search = read(&["+QENG: \"servingcell\",\"SEARCH\""]);
        assert_eq!(search.registered, Some(false));
    }

    #[test]
    fn simcom_telit_sierra() {
        let s = read(&[
            "+CPSI: LTE,Online,262-01,0x7D,27447553,123,EUTRAN-BAND3,1300,5,5,-110,-950,-650,15",
        ]);
        assert_eq!(s.tech, Some(Tech::Lte));
        assert_eq!(s.registered, Some(true));
        assert_eq!(s.location.as_ref().unwrap().ci, 27_447_553);
        assert_eq!(s.location.as_ref().unwrap().tac, 0x7D);
        assert_eq!(s.signal.rsrp_dbm, Some(-95.0));
        assert_eq!(s.signal.rsrq_db, Some(-11.0));
        assert_eq!(read(&["+CPSI: NO SERVICE,Online"]).registered, Some(false));

        let t = read(&["#RFSTS: \"262 01\",1300,-97,-66,-12,7D,255,,128,19,0,1A2B3C4,\"262011234567890\",\"Vodafone\",3,3"]);
        assert_eq!(t.location.as_ref().unwrap().ci, 0x1A2B3C4);
        assert_eq!(t.location.as_ref().unwrap().mnc, "01");
        assert_eq!(t.signal.rsrp_dbm, Some(-97.0));
        assert_eq!(t.signal.rssi_dbm, Some(-66.0));

        let g = read(&[
            "!GSTATUS: ",
            "Current Time:  1234\t\tTemperature: 41",
            "System mode:     LTE     PS state:  Attached",
            "LTE band:        B3      LTE bw:    20 MHz",
            "RSRQ (dB):       -10     SINR (dB):  13.2",
            "RSRP (dBm):      -94",
            "Cell ID:         01A2B3C4 (27405252)",
            "TAC:             007D (125)",
        ]);
        assert_eq!(g.tech, Some(Tech::Lte));
        assert_eq!(g.registered, Some(true));
        assert_eq!(g.signal.rsrp_dbm, Some(-94.0));
        assert_eq!(g.signal.rsrq_db, Some(-10.0));
        assert_eq!(g.signal.sinr_db, Some(13.2));
        assert_eq!(g.location.as_ref().unwrap().ci, 0x01A2B3C4);
        assert_eq!(g.location.as_ref().unwrap().tac, 0x7D);
    }

    #[test]
    fn generic_27007() {
        let r = read(&[
            "+CEREG: 2,1,\"7D\",\"1A2B3C4\",7",
            "+COPS: 0,2,\"26201\",7",
            "+CESQ: 99,99,255,255,20,45",
            "+CGACT: 1,0",
            "+CGACT: 2,1",
        ]);
        assert_eq!(r.registered, Some(true));
        assert_eq!(r.connected, Some(true));
        assert_eq!(read(&["+CGACT: 1,0"]).connected, Some(false));
        assert_eq!(r.tech, Some(Tech::Lte));
        let l = r.location.unwrap();
        assert_eq!(
            (l.mcc.as_str(), l.mnc.as_str(), l.tac, l.ci),
            ("262", "01", 0x7D, 0x1A2B3C4)
        );
        assert_eq!(r.signal.rsrp_dbm, Some(-96.0));
        assert_eq!(r.signal.rsrq_db, Some(-10.0));
        // Unsolicited: <stat>,<tac>,<ci>,<AcT>; and the short forms.
        let u = read(&["+CEREG: 5,\"7E\",\"1A2B3C5\",13"]);
        assert_eq!((u.registered, u.tech), (Some(true), Some(Tech::Nr)));
        assert_eq!(u.location.unwrap().ci, 0x1A2B3C5);
        assert_eq!(read(&["+CEREG: 2"]).registered, Some(false));
        assert_eq!(read(&["+CEREG: 0,1"]).registered, Some(true));
        assert_eq!(
            read(&["+CESQ: 99,99,255,255,255,255"]).signal,
            Signal::default()
        );
    }

    #[test]
    fn finals_and_garbage() {
        assert_eq!(final_code("OK"), Some(Final::Ok));
        assert!(matches!(
            final_code("+CME ERROR: 10"),
            Some(Final::Error(_))
        ));
        assert_eq!(final_code("+CEREG: 1"), None);
        let r = read(&[
            "+QENG:",
            "+CPSI:",
            "#RFSTS: ,",
            "+CEREG: x,y",
            "+COPS: ,,,",
            "+CESQ: 1",
            "\u{1}\u{2}garbage",
            ":",
            "+QENG: \"servingcell\",\"NOCONN\",\"LTE\",1,2",
        ]);
        assert_eq!(r.location, None);
        assert_eq!(r.signal, Signal::default());
        assert_eq!(
            AtFamily::from_manufacturer("Quectel"),
            Some(AtFamily::Quectel)
        );
        assert_eq!(
            AtFamily::from_manufacturer("SIMCOM INCORPORATED"),
            Some(AtFamily::Simcom)
        );
        assert_eq!(AtFamily::from_manufacturer("acme"), None);
    }

    proptest! {
        #[test]
        fn any_line_is_safe(lines in proptest::collection::vec("[ -~]{0,120}", 0..20)) {
            let mut r = AtReading::default();
            for l in &lines {
                r.feed(l);
            }
            if let Some(v) = r.signal.rsrp_dbm {
                prop_assert!((-160.0..=-30.0).contains(&v));
            }
        }

        #[test]
        fn prefixed_garbage_is_safe(kind in prop_oneof!["\\+QENG: ", "\\+CPSI: ", "#RFSTS: ", "\\+CEREG: ", "\\+COPS: ", "\\+CESQ: "], body in "[ -~]{0,120}") {
            let mut r = AtReading::default();
            r.feed(&format!("{kind}{body}"));
            if let Some(l) = &r.location {
                prop_assert!(l.ci < (1 << 36));
            }
        }
    }
}
