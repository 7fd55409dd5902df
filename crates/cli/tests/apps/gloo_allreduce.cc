// Allreduce with Gloo's ibverbs transport (libgloo-dev), unmodified Gloo:
// each rank connects to every other through a FileStore rendezvous in a
// directory all ranks see, then runs AllreduceRing and
// AllreduceHalvingDoubling over float vectors and checks every element.
//
//   gloo_allreduce RANK SIZE STORE_DIR ALGO COUNT ITERS [DEVICE]
//
// ALGO: ring | hd. Rank r contributes (i % 1000) + r * 7 at element i, so
// the sum is SIZE * (i % 1000) + 7 * SIZE * (SIZE - 1) / 2, exact in a
// float. Prints "rank R ok ALGO COUNT ITERS" and exits 0 when right.
//
// Gloo's own race (libgloo-dev is git 2022-05-18): an ibverbs Buffer's
// destructor enforces that no send is pending, and AllreduceRing does not
// wait for the completion of its last notification send, so destroying an
// algorithm right after run() aborts now and then on any device. Fixed
// upstream in pytorch/gloo 7a4c857 (#437: a warning instead) and f776fd2
// (#442: completion handlers cleared on teardown). This program therefore
// keeps its algorithms and context alive and leaves with _exit(). A
// barrier has no waitSend either: a rank leaves only once every rank has
// passed the final barrier (a "done" key per rank in the store), so every
// notification it sent was received.
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/ibverbs/device.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s RANK SIZE STORE_DIR ring|hd COUNT ITERS [DEVICE]\n",
                 argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int size = std::atoi(argv[2]);
  const std::string dir = argv[3];
  const std::string algo = argv[4];
  const int count = std::atoi(argv[5]);
  const int iters = std::atoi(argv[6]);
  gloo::transport::ibverbs::attr attr;
  attr.name = argc > 7 ? argv[7] : "softrdma0";
  attr.port = 1;
  attr.index = 0;
  auto dev = gloo::transport::ibverbs::CreateDevice(attr);
  gloo::rendezvous::FileStore store(dir);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> c = ctx;

  auto* data = new std::vector<float>(count);
  std::vector<float*> ptrs{data->data()};
  // Kept until _exit (see the top of the file).
  auto* keep = new std::vector<std::unique_ptr<gloo::Algorithm>>();
  long bad = 0;
  for (int it = 0; it < iters; it++) {
    for (int i = 0; i < count; i++) {
      (*data)[i] = float(i % 1000 + rank * 7 + it);
    }
    std::unique_ptr<gloo::Algorithm> a;
    if (algo == "ring") {
      a.reset(new gloo::AllreduceRing<float>(c, ptrs, count));
    } else if (algo == "hd") {
      a.reset(new gloo::AllreduceHalvingDoubling<float>(c, ptrs, count));
    } else {
      std::fprintf(stderr, "unknown algorithm %s\n", algo.c_str());
      return 2;
    }
    a->run();
    for (int i = 0; i < count; i++) {
      float want = float(size * (i % 1000 + it) + 7 * size * (size - 1) / 2);
      if ((*data)[i] != want) {
        if (bad < 5) {
          std::fprintf(stderr, "rank %d iter %d: element %d is %f, want %f\n", rank, it, i,
                       (*data)[i], want);
        }
        bad++;
      }
    }
    keep->push_back(std::move(a));
  }
  auto* barrier = new gloo::BarrierAllToAll(c);
  barrier->run();
  if (bad) {
    std::printf("rank %d FAILED: %ld wrong elements\n", rank, bad);
  } else {
    std::printf("rank %d ok %s %d %d\n", rank, algo.c_str(), count, iters);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  store.set("done" + std::to_string(rank), std::vector<char>{'1'});
  std::vector<std::string> all;
  for (int r = 0; r < size; r++) {
    all.push_back("done" + std::to_string(r));
  }
  store.wait(all);
  _exit(bad ? 1 : 0);
}
