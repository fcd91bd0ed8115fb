// The collective algorithms over the TCP mesh (and the shared-memory path
// when every rank shares this host).
//
// all_reduce      recursive doubling up to FLEMU_COMM_SMALL_ALLREDUCE bytes
//                 (log2(n) rounds, whole buffer each; non-powers of two fold
//                 the extra ranks in first), else ring reduce-scatter +
//                 ring all-gather (2(n-1) steps of 1/n of the buffer each;
//                 received data is reduced while it streams in)
// reduce_scatter  ring
// all_gather      ring
// broadcast       binomial tree up to FLEMU_COMM_SMALL_BROADCAST bytes, else a
//                 chain from the root that forwards bytes as they arrive
// all_to_all      every pair at once
// barrier         dissemination (ceil(log2 n) rounds of empty messages)
// send/recv       the pair's own connection, matched in order
#include <algorithm>
#include <cstring>

#include "communicator.h"
#include "interrupt.h"
#include "reduce.h"
#include "shm.h"
#include "../errors.h"

namespace flemu::comm {

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Splits `count` elements into n nearly equal chunks (the first count % n
// get one more).
struct Chunks {
  size_t count;
  int n;
  size_t start(int c) const {
    const size_t base = count / n, rem = count % n;
    return static_cast<size_t>(c) * base + std::min<size_t>(static_cast<size_t>(c), rem);
  }
  size_t size(int c) const {
    const size_t base = count / n, rem = count % n;
    return base + (static_cast<size_t>(c) < rem ? 1 : 0);
  }
};

Transfer send_to(Communicator& c, int peer, const char* data, size_t len, uint16_t step) {
  Transfer t;
  t.peer = peer;
  t.fd = c.coll_fd(peer);
  t.is_send = true;
  t.data = const_cast<char*>(data);
  t.len = len;
  t.step = step;
  return t;
}

Transfer recv_from(Communicator& c, int peer, char* data, size_t len, uint16_t step) {
  Transfer t;
  t.peer = peer;
  t.fd = c.coll_fd(peer);
  t.data = data;
  t.len = len;
  t.step = step;
  return t;
}

void ring_all_reduce(Communicator& c, const OpContext& ctx, const char* send, char* recv, size_t count,
                     int32_t dtype, int32_t op) {
  const int n = c.size(), r = c.rank();
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t es = static_cast<size_t>(element_size(dtype));
  const Chunks ch{count, n};
  char* tmp = c.scratch(ch.size(0) * es, 0);
  // Reduce-scatter: after n-1 steps this rank holds the full result of chunk r.
  for (int s = 0; s < n - 1; ++s) {
    const int sc = mod(r - s - 1, n), rc = mod(r - s - 2, n);
    const char* out_src = (s == 0 ? send : recv) + ch.start(sc) * es;
    char* out = recv + ch.start(rc) * es;
    const char* mine = send + ch.start(rc) * es;
    size_t reduced = 0;
    Transfer t[2] = {send_to(c, next, out_src, ch.size(sc) * es, static_cast<uint16_t>(s)),
                     recv_from(c, prev, tmp, ch.size(rc) * es, static_cast<uint16_t>(s))};
    t[1].on_data = [&](size_t, size_t to) {
      const size_t upto = to / es;
      if (upto > reduced) {
        reduce_to(out + reduced * es, tmp + reduced * es, mine + reduced * es, upto - reduced, dtype, op);
        reduced = upto;
      }
    };
    c.exchange(t, 2, ctx);
    if (s == n - 2) finish_reduction(out, ch.size(rc), dtype, op, n);
  }
  // All-gather of the reduced chunks.
  for (int s = 0; s < n - 1; ++s) {
    const int sc = mod(r - s, n), rc = mod(r - s - 1, n);
    Transfer t[2] = {send_to(c, next, recv + ch.start(sc) * es, ch.size(sc) * es, static_cast<uint16_t>(n - 1 + s)),
                     recv_from(c, prev, recv + ch.start(rc) * es, ch.size(rc) * es, static_cast<uint16_t>(n - 1 + s))};
    c.exchange(t, 2, ctx);
  }
}

void rd_all_reduce(Communicator& c, const OpContext& ctx, const char* send, char* recv, size_t count, int32_t dtype,
                   int32_t op) {
  const int n = c.size(), r = c.rank();
  const size_t es = static_cast<size_t>(element_size(dtype));
  const size_t bytes = count * es;
  if (send != recv && bytes != 0) std::memcpy(recv, send, bytes);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  char* tmp = c.scratch(bytes, 0);
  const auto last_step = static_cast<uint16_t>(rounds + 1);
  // Fold: the odd ranks among the first 2*extra hand their data to their
  // even neighbour and wait for the result.
  int vr;
  if (r < 2 * extra) {
    if (r % 2 == 1) {
      Transfer out = send_to(c, r - 1, recv, bytes, 0);
      c.exchange(&out, 1, ctx);
      Transfer in = recv_from(c, r - 1, recv, bytes, last_step);
      c.exchange(&in, 1, ctx);
      return;
    }
    Transfer in = recv_from(c, r + 1, tmp, bytes, 0);
    c.exchange(&in, 1, ctx);
    reduce_into(recv, tmp, count, dtype, op);
    vr = r / 2;
  } else {
    vr = r - extra;
  }
  for (int k = 0; k < rounds; ++k) {
    const int pv = vr ^ (1 << k);
    const int partner = pv < extra ? pv * 2 : pv + extra;
    Transfer t[2] = {send_to(c, partner, recv, bytes, static_cast<uint16_t>(k + 1)),
                     recv_from(c, partner, tmp, bytes, static_cast<uint16_t>(k + 1))};
    c.exchange(t, 2, ctx);
    // Both partners compute the same value: every op is commutative.
    reduce_into(recv, tmp, count, dtype, op);
  }
  finish_reduction(recv, count, dtype, op, n);
  if (r < 2 * extra) {
    Transfer out = send_to(c, r + 1, recv, bytes, last_step);
    c.exchange(&out, 1, ctx);
  }
}

}  // namespace

template <class Fn>
void Communicator::run(OpKind kind, Fn&& fn) {
  std::lock_guard<std::mutex> lock(coll_mu_);
  const uint64_t seq = ++coll_seq_;
  OpContext ctx{kind, seq, op_deadline_ms(), cat(op_kind_name(kind), " #", seq)};
  if (broken_.load()) rethrow_broken(&ctx);
  try {
    fn(ctx);
  } catch (const Interrupted&) {
    rethrow_broken(&ctx);
  } catch (const Error& e) {
    if (!broken_.load()) fail(ctx, e.code(), e.what());
    throw;
  }
}

template <class Fn>
void Communicator::run_p2p(OpKind kind, int peer, bool sending, Fn&& fn) {
  std::lock_guard<std::mutex> lock(sending ? send_mu_[peer] : recv_mu_[peer]);
  const uint64_t seq = sending ? ++send_seq_[peer] : ++recv_seq_[peer];
  OpContext ctx{kind, seq, op_deadline_ms(),
                cat(sending ? "send #" : "recv #", seq, sending ? " to rank " : " from rank ", peer)};
  if (broken_.load()) rethrow_broken(&ctx);
  try {
    fn(ctx);
  } catch (const Interrupted&) {
    rethrow_broken(&ctx);
  } catch (const Error& e) {
    if (!broken_.load()) fail(ctx, e.code(), e.what());
    throw;
  }
}

void Communicator::all_reduce(const char* send, char* recv, size_t count, int32_t dtype, int32_t op) {
  const size_t bytes = count * static_cast<size_t>(element_size(dtype));
  run(OpKind::kAllReduce, [&](const OpContext& ctx) {
    if (size_ == 1) {
      if (send != recv && bytes != 0) std::memcpy(recv, send, bytes);
      return;
    }
    if (use_shm(bytes) && shm_->all_reduce(ctx, send, recv, count, dtype, op)) return;
    if (bytes <= tuning().allreduce_small_bytes || count < static_cast<size_t>(size_))
      rd_all_reduce(*this, ctx, send, recv, count, dtype, op);
    else
      ring_all_reduce(*this, ctx, send, recv, count, dtype, op);
  });
}

void Communicator::all_gather(const char* send, char* recv, size_t count, int32_t dtype) {
  const size_t chunk = count * static_cast<size_t>(element_size(dtype));
  run(OpKind::kAllGather, [&](const OpContext& ctx) {
    char* own = recv + static_cast<size_t>(rank_) * chunk;
    if (send != own && chunk != 0) std::memmove(own, send, chunk);
    if (size_ == 1) return;
    if (use_shm(chunk * static_cast<size_t>(size_)) && shm_->all_gather(ctx, recv, chunk)) return;
    const int next = mod(rank_ + 1, size_), prev = mod(rank_ - 1, size_);
    for (int s = 0; s < size_ - 1; ++s) {
      const int sc = mod(rank_ - s, size_), rc = mod(rank_ - s - 1, size_);
      Transfer t[2] = {send_to(*this, next, recv + sc * chunk, chunk, static_cast<uint16_t>(s)),
                       recv_from(*this, prev, recv + rc * chunk, chunk, static_cast<uint16_t>(s))};
      exchange(t, 2, ctx);
    }
  });
}

void Communicator::reduce_scatter(const char* send, char* recv, size_t count, int32_t dtype, int32_t op) {
  const size_t es = static_cast<size_t>(element_size(dtype));
  const size_t chunk = count * es;
  run(OpKind::kReduceScatter, [&](const OpContext& ctx) {
    if (size_ == 1) {
      if (send != recv && chunk != 0) std::memmove(recv, send, chunk);
      return;
    }
    if (use_shm(chunk * static_cast<size_t>(size_)) && shm_->reduce_scatter(ctx, send, recv, count, dtype, op))
      return;
    const int next = mod(rank_ + 1, size_), prev = mod(rank_ - 1, size_);
    char* bufs[2] = {scratch(chunk, 1), scratch(chunk, 2)};
    const char* sending = send + static_cast<size_t>(mod(rank_ - 1, size_)) * chunk;
    for (int s = 0; s < size_ - 1; ++s) {
      const int rc = mod(rank_ - s - 2, size_);
      char* rb = bufs[s % 2];
      const bool last = s == size_ - 2;  // then rc == rank_
      char* out = last ? recv : rb;
      const char* mine = send + static_cast<size_t>(rc) * chunk;
      size_t reduced = 0;
      Transfer t[2] = {send_to(*this, next, sending, chunk, static_cast<uint16_t>(s)),
                       recv_from(*this, prev, rb, chunk, static_cast<uint16_t>(s))};
      t[1].on_data = [&](size_t, size_t to) {
        const size_t upto = to / es;
        if (upto > reduced) {
          reduce_to(out + reduced * es, rb + reduced * es, mine + reduced * es, upto - reduced, dtype, op);
          reduced = upto;
        }
      };
      exchange(t, 2, ctx);
      if (last) finish_reduction(recv, count, dtype, op, size_);
      sending = rb;
    }
  });
}

void Communicator::broadcast(const char* send, char* recv, size_t count, int32_t dtype, int root) {
  const size_t bytes = count * static_cast<size_t>(element_size(dtype));
  run(OpKind::kBroadcast, [&](const OpContext& ctx) {
    if (rank_ == root && send != recv && bytes != 0) std::memmove(recv, send, bytes);
    if (size_ == 1) return;
    if (use_shm(bytes) && shm_->broadcast(ctx, recv, bytes, root)) return;
    const int vr = mod(rank_ - root, size_);
    if (bytes <= tuning().broadcast_small_bytes || size_ == 2) {
      // Binomial tree: receive from the parent, then send to every child.
      std::vector<Transfer> t;
      int mask = 1;
      while (mask < size_) {
        if (vr & mask) {
          Transfer in = recv_from(*this, mod(vr - mask + root, size_), recv, bytes, 0);
          exchange(&in, 1, ctx);
          break;
        }
        mask <<= 1;
      }
      for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < size_) t.push_back(send_to(*this, mod(vr + mask + root, size_), recv, bytes, 0));
      if (!t.empty()) exchange(t.data(), t.size(), ctx);
      return;
    }
    // Chain: forward bytes to the next rank as soon as they arrive.
    size_t received = 0;
    std::vector<Transfer> t;
    if (vr > 0) {
      t.push_back(recv_from(*this, mod(rank_ - 1, size_), recv, bytes, 0));
      t.back().on_data = [&](size_t, size_t to) { received = to; };
    }
    if (vr < size_ - 1) {
      t.push_back(send_to(*this, mod(rank_ + 1, size_), recv, bytes, 0));
      if (vr > 0) t.back().ready = &received;
    }
    exchange(t.data(), t.size(), ctx);
  });
}

void Communicator::all_to_all(const char* send, char* recv, const std::vector<size_t>& send_counts,
                              const std::vector<size_t>& send_offsets, const std::vector<size_t>& recv_counts,
                              const std::vector<size_t>& recv_offsets, int32_t dtype) {
  const size_t es = static_cast<size_t>(element_size(dtype));
  run(OpKind::kAllToAll, [&](const OpContext& ctx) {
    if (send_counts[rank_] != 0)
      std::memmove(recv + recv_offsets[rank_] * es, send + send_offsets[rank_] * es, send_counts[rank_] * es);
    if (size_ == 1) return;
    std::vector<Transfer> t;
    t.reserve(2 * static_cast<size_t>(size_));
    for (int k = 1; k < size_; ++k) {
      // Staggered so that not every rank starts with the same peer.
      const int to = mod(rank_ + k, size_), from = mod(rank_ - k, size_);
      t.push_back(send_to(*this, to, send + send_offsets[to] * es, send_counts[to] * es, 0));
      t.push_back(recv_from(*this, from, recv + recv_offsets[from] * es, recv_counts[from] * es, 0));
    }
    exchange(t.data(), t.size(), ctx);
  });
}

void Communicator::barrier() {
  run(OpKind::kBarrier, [&](const OpContext& ctx) {
    if (size_ == 1) return;
    uint16_t step = 0;
    for (int dist = 1; dist < size_; dist *= 2, ++step) {
      Transfer t[2] = {send_to(*this, mod(rank_ + dist, size_), nullptr, 0, step),
                       recv_from(*this, mod(rank_ - dist, size_), nullptr, 0, step)};
      exchange(t, 2, ctx);
    }
  });
}

void Communicator::send(const char* buf, size_t count, int32_t dtype, int peer) {
  const size_t bytes = count * static_cast<size_t>(element_size(dtype));
  run_p2p(OpKind::kSend, peer, true, [&](const OpContext& ctx) {
    Transfer t;
    t.peer = peer;
    t.fd = p2p_[peer].get();
    t.is_send = true;
    t.data = const_cast<char*>(buf);
    t.len = bytes;
    exchange(&t, 1, ctx);
  });
}

void Communicator::recv(char* buf, size_t count, int32_t dtype, int peer) {
  const size_t bytes = count * static_cast<size_t>(element_size(dtype));
  run_p2p(OpKind::kSend, peer, false, [&](const OpContext& ctx) {
    Transfer t;
    t.peer = peer;
    t.fd = p2p_[peer].get();
    t.data = buf;
    t.len = bytes;
    exchange(&t, 1, ctx);
  });
}

}  // namespace flemu::comm
