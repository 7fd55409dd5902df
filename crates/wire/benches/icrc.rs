//! ICRC throughput: parsing a received datagram and checking its ICRC, and
//! emitting one with its ICRC, at 64 B, 1 KiB and 4 KiB payloads (IPv4, RC
//! RDMA WRITE ONLY: BTH + RETH). The throughput is the datagram length (IP
//! header through ICRC) in decimal units,
//! so criterion prints GB/s (1 GB = 10^9 bytes). `icrc` is the ICRC alone
//! over an already parsed datagram.
//!
//! ```text
//! cargo bench -p softrdma-wire --bench icrc
//! ```

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use softrdma_wire::{
    BthRepr, DatagramRepr, Opcode, PacketRepr, Psn, Qpn, RKey, RethRepr, RoceDatagram,
};
use std::hint::black_box;

const SIZES: [usize; 3] = [64, 1024, 4096];

fn datagram() -> DatagramRepr {
    DatagramRepr::between(
        "198.18.0.2:49476".parse().unwrap(),
        "198.18.0.1:4791".parse().unwrap(),
    )
    .unwrap()
}

fn packet(payload: &[u8]) -> PacketRepr<'_> {
    let mut p = PacketRepr::new(
        BthRepr {
            pad_count: PacketRepr::pad_for(payload.len()),
            ack_req: true,
            // RC_RDMA_WRITE_ONLY
            ..BthRepr::new(Opcode(0x0a), Qpn::new(0x11), Psn::new(0x123456))
        },
        payload,
    );
    p.reth = Some(RethRepr {
        va: 0x55a4_ecf9_d000,
        rkey: RKey(0x14c6),
        dma_len: payload.len() as u32,
    });
    p
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 131 + 7) as u8).collect()
}

fn parse_and_verify(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse+icrc_verify");
    for n in SIZES {
        let data = payload(n);
        let d = datagram();
        let p = packet(&data);
        let mut buf = vec![0u8; d.header_len() + p.buffer_len()];
        d.emit(&p, &mut buf).unwrap();
        g.throughput(Throughput::BytesDecimal(buf.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(n), &buf, |b, buf| {
            b.iter(|| {
                let dg = RoceDatagram::new_checked(black_box(&buf[..])).unwrap();
                let r = PacketRepr::parse(&dg.ib()).unwrap();
                assert!(dg.icrc_ok());
                black_box(r.bth.psn)
            })
        });
    }
    g.finish();
}

fn emit_with_icrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("emit+icrc");
    for n in SIZES {
        let data = payload(n);
        let d = datagram();
        let p = packet(&data);
        let mut buf = vec![0u8; d.header_len() + p.buffer_len()];
        g.throughput(Throughput::BytesDecimal(buf.len() as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(d.emit(black_box(&p), &mut buf).unwrap()))
        });
    }
    g.finish();
}

fn icrc_only(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc");
    for n in SIZES {
        let data = payload(n);
        let d = datagram();
        let p = packet(&data);
        let mut buf = vec![0u8; d.header_len() + p.buffer_len()];
        d.emit(&p, &mut buf).unwrap();
        let dg = RoceDatagram::new_checked(&buf[..]).unwrap();
        g.throughput(Throughput::BytesDecimal(buf.len() as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(black_box(&dg).compute_icrc()))
        });
    }
    g.finish();
}

criterion_group!(benches, parse_and_verify, emit_with_icrc, icrc_only);
criterion_main!(benches);
