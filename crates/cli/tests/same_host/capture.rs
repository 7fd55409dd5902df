//! Captures of the same-host path, decoded as the wire would be.

use super::*;

#[test]
fn captures_of_the_path_decode_as_the_wire_would() {
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cap-{addr}.pcap");
    let (ic, tc) = ops_with(
        "shm",
        "127.64.6.1",
        "127.64.6.2",
        &[("SOFTRDMA_PCAP", pcap.display().to_string())],
    );
    assert_path_carried(&ic, &tc);
    for ip in ["127.64.6.1", "127.64.6.2"] {
        let f = dir.join(format!("cap-{ip}.pcap"));
        let text = dump(&f);
        // Both directions, every kind of packet the run made, sent and
        // received, all with good ICRCs.
        for what in [
            // (WRITE ONLY per packet towards loopback peers.)
            "RC_RDMA_WRITE_",
            "RC_RDMA_READ_REQUEST",
            "RC_RDMA_READ_RESPONSE_",
            "RC_FETCH_ADD",
            "RC_COMPARE_SWAP",
            "RC_ATOMIC_ACKNOWLEDGE",
            "RC_SEND_ONLY",
            "RC_ACKNOWLEDGE",
            "127.64.6.1:4791 > 127.64.6.2:4791",
            "127.64.6.2:4791 > 127.64.6.1:4791",
            "ICRC bad 0, malformed 0",
        ] {
            assert!(
                text.contains(what),
                "{what} missing in {}:\n{text}",
                f.display()
            );
        }
        assert!(!text.contains("icrc=bad"), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// CRC-32 (the Ethernet polynomial, reflected, initial value and final
/// XOR all ones), bit by bit: computed here without softrdma's code.
fn crc32(bytes: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in bytes {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0xedb8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// The ICRC of a RoCE v2 datagram over IPv4 (`ip`: IP header through
/// ICRC), as IBA annex A17.3.3 defines it: 8 bytes of 0xff, the IP header
/// with type of service, time to live and checksum all ones, the UDP
/// header with its checksum all ones, the BTH with its byte 4 all ones,
/// the rest up to the ICRC. (No FLUSH in these runs: rxe's form of its
/// ICRC differs.)
fn annex_icrc(ip: &[u8]) -> u32 {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let mut v = vec![0xffu8; 8];
    v.extend_from_slice(&ip[..ip.len() - 4]);
    let (h, u, b) = (8, 8 + ihl, 8 + ihl + 8);
    v[h + 1] = 0xff; // type of service
    v[h + 8] = 0xff; // time to live
    v[h + 10..h + 12].fill(0xff); // header checksum
    v[u + 6..u + 8].fill(0xff); // UDP checksum
    v[b + 4] = 0xff; // BTH: FECN, BECN, reserved
    crc32(&v)
}

/// The frames of a pcap file of link type RAW (IP first), in order.
fn pcap_frames(file: &std::path::Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(d.len() >= 24, "{}: no pcap header", file.display());
    let magic = u32::from_le_bytes(d[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("{}: not a pcap file (magic {m:#x})", file.display()),
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = d[at..at + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    // LINKTYPE_RAW (101).
    assert_eq!(u32_at(20), 101, "{}: link type", file.display());
    let mut frames = Vec::new();
    let mut at = 24;
    while at < d.len() {
        let len = u32_at(at + 8) as usize;
        assert_eq!(len, u32_at(at + 12) as usize, "a cut frame");
        frames.push(d[at + 16..at + 16 + len].to_vec());
        at += 16 + len;
    }
    frames
}

/// Both processes capture (`SOFTRDMA_PCAP`) a run over the same-host path:
/// tshark decodes every frame of both files as RoCE v2 (InfiniBand over
/// UDP 4791, nothing malformed), and every packet's ICRC — as tshark
/// reads it, and as computed here from the annex — is right. The packets
/// of the path are captured as the wire would carry them, ICRC included,
/// whatever the path itself carries.
#[test]
fn captures_of_the_path_on_both_sides_decode_in_tshark_with_good_icrcs() {
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-ts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("cap-{addr}.pcap");
    let (a, b) = ("127.74.2.1", "127.74.2.2");
    let (ic, tc) = ops_with(
        "shm",
        a,
        b,
        &[("SOFTRDMA_PCAP", pcap.display().to_string())],
    );
    assert_path_carried(&ic, &tc);
    for ip in [a, b] {
        let f = dir.join(format!("cap-{ip}.pcap"));
        let frames = pcap_frames(&f);
        let t = Command::new("tshark")
            .arg("-r")
            .arg(&f)
            .args(["-d", "udp.port==4791,infiniband", "-T", "fields"])
            .args(["-e", "frame.number", "-e", "_ws.malformed"])
            .args([
                "-e",
                "infiniband.bth.opcode",
                "-e",
                "infiniband.invariant.crc",
            ])
            .output()
            .expect("tshark (apt-get install -y tshark; scripts/deps installs it)");
        let out = String::from_utf8_lossy(&t.stdout);
        let err = String::from_utf8_lossy(&t.stderr);
        assert!(t.status.success(), "tshark: {err}");
        assert!(
            !err.contains("damaged") && !err.contains("cut short"),
            "{err}"
        );
        let lines: Vec<&str> = out.lines().collect();
        // Both directions, each a good part of the run (the 512 KiB WRITE
        // alone is 128 packets one way).
        assert!(
            frames.len() > 300,
            "{}: {} frames",
            f.display(),
            frames.len()
        );
        assert_eq!(lines.len(), frames.len(), "tshark saw:\n{out}");
        let (mut sent, mut received) = (0, 0);
        for (l, frame) in lines.iter().zip(&frames) {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 4, "{l}");
            assert!(cols[1].is_empty(), "tshark: malformed: {l}");
            assert!(!cols[2].is_empty(), "tshark did not decode a BTH: {l}");
            let trailer: [u8; 4] = frame[frame.len() - 4..].try_into().unwrap();
            let shown = u32::from_str_radix(cols[3].trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("tshark shows no ICRC: {l}"));
            assert_eq!(shown, u32::from_be_bytes(trailer), "{l}");
            // Stored least significant byte first.
            assert_eq!(
                annex_icrc(frame),
                u32::from_le_bytes(trailer),
                "{}: frame {} has a bad ICRC",
                f.display(),
                cols[0]
            );
            let src = std::net::Ipv4Addr::new(frame[12], frame[13], frame[14], frame[15]);
            if src.to_string() == ip {
                sent += 1;
            } else {
                received += 1;
            }
        }
        assert!(
            sent > 100 && received > 100,
            "{ip}: sent {sent}, received {received}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_receiver_alone_capturing_records_the_icrc_its_sender_left_out() {
    // The initiator captures nothing, so it leaves the ICRC of its
    // zero-copy packets out of the ring (the receiver does not check it);
    // the target captures, and its capture must still hold the packets
    // the wire would carry, ICRC included (computed as they are
    // recorded).
    let dir = std::env::temp_dir().join(format!("softrdma-samehost-rx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("target.pcap");
    let (ic, tc) = ops_with_target(
        "shm",
        "127.72.6.1",
        "127.72.6.2",
        &[],
        &[("SOFTRDMA_PCAP", f.display().to_string())],
    );
    assert_path_carried(&ic, &tc);
    let text = dump(&f);
    for what in [
        "RC_RDMA_WRITE_",
        "RC_SEND_ONLY",
        "RC_RDMA_READ_RESPONSE_",
        "127.72.6.1:4791 > 127.72.6.2:4791",
        "127.72.6.2:4791 > 127.72.6.1:4791",
        "ICRC bad 0, malformed 0",
    ] {
        assert!(
            text.contains(what),
            "{what} missing in {}:\n{text}",
            f.display()
        );
    }
    assert!(!text.contains("icrc=bad"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `softrdma dump FILE`'s output (it must succeed).
fn dump(file: &std::path::Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_softrdma"))
        .arg("dump")
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}
