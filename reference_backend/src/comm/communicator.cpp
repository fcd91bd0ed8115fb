#include "communicator.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

#include "interrupt.h"
#include "shm.h"
#include "../errors.h"
#include "../stream.h"  // name_this_thread

namespace flemu::comm {

namespace {

constexpr char kIdMagic[8] = {'F', 'L', 'E', 'M', 'U', 'I', 'D', '1'};
constexpr uint32_t kHelloMagic = 0x464c4849;    // "FLHI"
constexpr uint32_t kConnectMagic = 0x464c434f;  // "FLCO"
constexpr uint32_t kReadyMagic = 0x464c5244;    // "FLRD"
constexpr uint32_t kGoMagic = 0x464c474f;       // "FLGO"
constexpr uint32_t kNoticeMagic = 0x464c4e4f;   // "FLNO"
constexpr uint32_t kMsgMagic = 0x464c4d53;      // "FLMS"
constexpr uint32_t kProtocolVersion = 1;

// The layout flemu puts inside TFL_CommUniqueId.
struct IdLayout {
  char magic[8];
  uint32_t version;
  uint32_t root_pid;
  Endpoint root;
  uint8_t nonce[16];
};
static_assert(sizeof(IdLayout) <= TFL_COMM_UNIQUE_ID_BYTES, "the id fits in TFL_CommUniqueId");

struct Hello {
  uint32_t magic;
  uint32_t version;
  uint8_t nonce[16];
  int32_t rank;
  int32_t world_size;
  PeerInfo info;
};

struct Connect {
  uint32_t magic;
  uint32_t channel;  // 0 collectives, 1 send/recv
  uint8_t nonce[16];
  int32_t rank;
  int32_t reserved;
};

enum NoticeKind : uint32_t { kFail = 1, kBye = 2 };
struct Notice {
  uint32_t magic;
  uint32_t kind;
  int32_t origin;
  int32_t code;
  char text[240];
};
static_assert(sizeof(Notice) == 256, "control notices are 256 bytes");

// Listening sockets made by create_unique_id, waiting for rank 0's Comm_Init.
std::mutex g_listeners_mu;
std::map<std::string, Fd> g_listeners;

std::string nonce_key(const uint8_t* nonce) { return std::string(reinterpret_cast<const char*>(nonce), 16); }

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// Processes with the same key share a host and a pid namespace, so they can
// open each other's memory through /proc/<pid>/fd.
void make_host_key(char* out, size_t size) {
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  struct stat st {};
  const unsigned long long pidns = stat("/proc/self/ns/pid", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
  const std::string key = cat(host, "/", read_first_line("/proc/sys/kernel/random/boot_id"), "/", pidns);
  std::memset(out, 0, size);
  std::strncpy(out, key.c_str(), size - 1);
}

size_t env_bytes(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  size_t mult = 1;
  if (end != nullptr && (*end == 'K' || *end == 'k')) mult = size_t{1} << 10;
  else if (end != nullptr && (*end == 'M' || *end == 'm')) mult = size_t{1} << 20;
  else if (end != nullptr && *end != '\0')
    invalid_argument(name, "='", v, "' is not a byte count (digits with an optional K or M suffix)");
  return static_cast<size_t>(n) * mult;
}

Fd make_eventfd() {
  Fd fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd.valid()) flemu::fail(TFL_ERR_UNAVAILABLE, cat("eventfd failed: ", std::strerror(errno)));
  return fd;
}

void signal_eventfd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
}

std::string rank_name(int r) { return cat("rank ", r); }

}  // namespace

const Tuning& tuning() {
  static const Tuning t = [] {
    Tuning t{};
    // Recursive doubling sends the whole buffer log2(n) times; the ring sends
    // 2(n-1)/n of it in 2(n-1) steps. Below ~256 KiB the ring's extra steps
    // (each a poll round trip, ~30-60 us on loopback) cost more than the
    // bytes recursive doubling sends twice (see the README's measurements).
    t.allreduce_small_bytes = env_bytes("FLEMU_COMM_SMALL_ALLREDUCE", size_t{256} << 10);
    t.broadcast_small_bytes = env_bytes("FLEMU_COMM_SMALL_BROADCAST", size_t{64} << 10);
    const char* shm = std::getenv("FLEMU_COMM_SHM");
    t.shared_memory = !(shm != nullptr && std::strcmp(shm, "0") == 0);
    // The shared-memory path synchronizes three times per operation (posted,
    // read, finished); below this size one TCP round trip is cheaper.
    t.shared_memory_min_bytes = env_bytes("FLEMU_COMM_SHM_MIN_BYTES", size_t{256} << 10);
    return t;
  }();
  return t;
}

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce: return "all_reduce";
    case OpKind::kAllGather: return "all_gather";
    case OpKind::kReduceScatter: return "reduce_scatter";
    case OpKind::kBroadcast: return "broadcast";
    case OpKind::kAllToAll: return "all_to_all";
    case OpKind::kSend: return "send/recv";
    case OpKind::kBarrier: return "barrier";
  }
  return "an unknown operation";
}

void create_unique_id(TFL_CommUniqueId* id) {
  IdLayout layout{};
  std::memcpy(layout.magic, kIdMagic, sizeof(kIdMagic));
  layout.version = kProtocolVersion;
  layout.root_pid = static_cast<uint32_t>(getpid());
  std::random_device rd;
  for (size_t i = 0; i < sizeof(layout.nonce); i += 4) {
    const uint32_t v = rd();
    std::memcpy(layout.nonce + i, &v, 4);
  }
  Endpoint host = advertised_host();
  Endpoint bound;
  Fd listener = listen_any(host.family, &bound);
  layout.root = host;
  layout.root.port = bound.port;
  {
    std::lock_guard<std::mutex> lock(g_listeners_mu);
    g_listeners.emplace(nonce_key(layout.nonce), std::move(listener));
  }
  std::memset(id->bytes, 0, sizeof(id->bytes));
  std::memcpy(id->bytes, &layout, sizeof(layout));
}

// ---------------------------------------------------------------------------
// Bootstrap
// ---------------------------------------------------------------------------

Communicator::Communicator(int32_t device, int32_t world_size, int32_t rank, int64_t timeout_ms)
    : device_(device), size_(world_size), rank_(rank), timeout_ms_(timeout_ms) {
  coll_.resize(size_);
  p2p_.resize(size_);
  peers_.resize(size_);
  send_mu_ = std::make_unique<std::mutex[]>(size_);
  recv_mu_ = std::make_unique<std::mutex[]>(size_);
  send_seq_.assign(size_, 0);
  recv_seq_.assign(size_, 0);
  wake_ = make_eventfd();
  monitor_stop_ = make_eventfd();
}

std::shared_ptr<Communicator> Communicator::create(int32_t device, int32_t world_size, int32_t rank,
                                                   const TFL_CommUniqueId& id, int64_t timeout_ms) {
  std::shared_ptr<Communicator> comm(new Communicator(device, world_size, rank, timeout_ms));
  comm->bootstrap(id);
  comm->start_monitor();
  if (world_size > 1) {
    // Every rank takes part in the set-up, even with FLEMU_COMM_SHM=0 (it
    // then says no): a rank that skipped it would desynchronize the others.
    comm->shm_ = SharedMemoryPath::create(*comm);
    // Messages number the caller's operations from #1 whichever transport
    // runs them. Reusing the set-up's numbers is safe: its exchanges are over
    // on this rank and their bytes precede later ones on every connection.
    comm->coll_seq_ = 0;
  }
  return comm;
}

void Communicator::bootstrap(const TFL_CommUniqueId& id) {
  IdLayout layout;
  std::memcpy(&layout, id.bytes, sizeof(layout));
  if (std::memcmp(layout.magic, kIdMagic, sizeof(kIdMagic)) != 0)
    invalid_argument("the unique id was not made by flemu's Comm_GetUniqueId (bad magic)");
  if (layout.version != kProtocolVersion)
    invalid_argument("the unique id speaks protocol ", layout.version, ", this flemu speaks ", kProtocolVersion);
  std::memcpy(nonce_, layout.nonce, 16);
  const int64_t deadline = now_ms() + timeout_ms_;
  make_host_key(peers_[rank_].host_key, sizeof(peers_[rank_].host_key));
  peers_[rank_].pid = static_cast<int32_t>(getpid());
  peers_[rank_].device = device_;

  if (size_ == 1) return;

  if (rank_ == 0) {
    Fd listener;
    {
      std::lock_guard<std::mutex> lock(g_listeners_mu);
      auto it = g_listeners.find(nonce_key(layout.nonce));
      if (it == g_listeners.end())
        invalid_argument("rank 0 must call Comm_Init in the process whose Comm_GetUniqueId made the id "
                         "(its listening socket lives there), once per id");
      listener = std::move(it->second);
      g_listeners.erase(it);
    }
    Endpoint data_bound;
    Fd data_listener = listen_any(layout.root.family, &data_bound);
    peers_[0].data = layout.root;
    peers_[0].data.port = data_bound.port;

    // Hellos from every other rank, in any order.
    control_.resize(size_);
    int joined = 1;
    while (joined < size_) {
      Fd c = accept_until(listener.get(), deadline, -1);
      if (!c.valid()) {
        std::string missing;
        for (int r = 1; r < size_; ++r)
          if (!control_[r].valid()) missing += cat(missing.empty() ? "" : ", ", r);
        flemu::fail(TFL_ERR_TIMEOUT,
                    cat("Comm_Init timed out after ", timeout_ms_, " ms: ", joined, " of ", size_,
                        " ranks joined; missing rank(s) ", missing,
                        " (did every rank call Comm_Init with this unique id?)"));
      }
      Hello h{};
      try {
        read_all(c.get(), &h, sizeof(h), std::min(deadline, now_ms() + 10'000), -1, "a joining rank");
      } catch (const Error&) {
        continue;  // not one of ours, or it went away: keep listening
      }
      if (h.magic != kHelloMagic || std::memcmp(h.nonce, layout.nonce, 16) != 0) continue;
      if (h.world_size != size_)
        invalid_argument("rank ", h.rank, " called Comm_Init with world size ", h.world_size,
                         " but rank 0 with world size ", size_);
      if (h.rank <= 0 || h.rank >= size_) invalid_argument("a rank joined as rank ", h.rank, " of ", size_);
      if (control_[h.rank].valid()) invalid_argument("two processes joined as rank ", h.rank);
      peers_[h.rank] = h.info;
      // Reach the rank at the address its connection came from: that one
      // routes from here.
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      if (getpeername(c.get(), reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
        const Endpoint seen = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss));
        if (seen.family == peers_[h.rank].data.family) {
          std::memcpy(peers_[h.rank].data.addr, seen.addr, sizeof(seen.addr));
        }
      }
      control_[h.rank] = std::move(c);
      ++joined;
    }
    listener.reset();
    for (int r = 1; r < size_; ++r)
      write_all(control_[r].get(), peers_.data(), sizeof(PeerInfo) * size_, deadline, -1, rank_name(r));
    build_mesh(data_listener, deadline);
    for (int r = 1; r < size_; ++r) {
      uint32_t ready = 0;
      read_all(control_[r].get(), &ready, sizeof(ready), deadline, -1, rank_name(r));
      if (ready != kReadyMagic) flemu::fail(TFL_ERR_INTERNAL, cat("rank ", r, " sent a bad ready message"));
    }
    for (int r = 1; r < size_; ++r) write_all(control_[r].get(), &kGoMagic, sizeof(kGoMagic), deadline, -1, rank_name(r));
    return;
  }

  // Every other rank: its data listener first, so the table can name it.
  Endpoint data_bound;
  Fd data_listener = listen_any(layout.root.family, &data_bound);
  control_.resize(1);
  control_[0] = connect_to(layout.root, deadline, -1, "rank 0");
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(control_[0].get(), reinterpret_cast<sockaddr*>(&ss), &len);
  peers_[rank_].data = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss));
  peers_[rank_].data.port = data_bound.port;
  Hello h{};
  h.magic = kHelloMagic;
  h.version = kProtocolVersion;
  std::memcpy(h.nonce, layout.nonce, 16);
  h.rank = rank_;
  h.world_size = size_;
  h.info = peers_[rank_];
  write_all(control_[0].get(), &h, sizeof(h), deadline, -1, "rank 0");
  try {
    read_all(control_[0].get(), peers_.data(), sizeof(PeerInfo) * size_, deadline, -1, "rank 0");
  } catch (const Error& e) {
    if (e.code() == TFL_ERR_TIMEOUT)
      flemu::fail(TFL_ERR_TIMEOUT, cat("Comm_Init timed out after ", timeout_ms_,
                                       " ms waiting for the other ranks to join (rank 0 is reachable at ",
                                       layout.root.str(), ")"));
    flemu::fail(e.code(), cat("rank 0 ended Comm_Init: ", e.what(),
                              " (it may have failed: a wrong world size, a duplicate rank, or a timeout)"));
  }
  build_mesh(data_listener, deadline);
  write_all(control_[0].get(), &kReadyMagic, sizeof(kReadyMagic), deadline, -1, "rank 0");
  uint32_t go = 0;
  read_all(control_[0].get(), &go, sizeof(go), deadline, -1, "rank 0");
  if (go != kGoMagic) flemu::fail(TFL_ERR_INTERNAL, "rank 0 sent a bad start message");
}

void Communicator::build_mesh(const Fd& listener, int64_t deadline_ms) {
  // A connection that does not carry this group's nonce (a stray or stale
  // process) is dropped.
  for (int q = 0; q < rank_; ++q) {
    for (uint32_t ch = 0; ch < 2; ++ch) {
      Fd fd = connect_to(peers_[q].data, deadline_ms, -1, rank_name(q));
      Connect c{};
      c.magic = kConnectMagic;
      c.channel = ch;
      std::memcpy(c.nonce, nonce_, 16);
      c.rank = rank_;
      write_all(fd.get(), &c, sizeof(c), deadline_ms, -1, rank_name(q));
      (ch == 0 ? coll_ : p2p_)[q] = std::move(fd);
    }
  }
  int expected = 2 * (size_ - 1 - rank_);
  while (expected > 0) {
    Fd fd = accept_until(listener.get(), deadline_ms, -1);
    if (!fd.valid()) {
      std::string missing;
      for (int q = rank_ + 1; q < size_; ++q)
        if (!coll_[q].valid() || !p2p_[q].valid()) missing += cat(missing.empty() ? "" : ", ", q);
      flemu::fail(TFL_ERR_TIMEOUT, cat("Comm_Init timed out after ", timeout_ms_, " ms connecting rank ", rank_,
                                       " to rank(s) ", missing));
    }
    Connect c{};
    try {
      read_all(fd.get(), &c, sizeof(c), std::min(deadline_ms, now_ms() + 10'000), -1, "a connecting rank");
    } catch (const Error&) {
      continue;
    }
    if (c.magic != kConnectMagic || std::memcmp(c.nonce, nonce_, 16) != 0 || c.rank <= rank_ || c.rank >= size_ || c.channel > 1) continue;
    Fd& slot = (c.channel == 0 ? coll_ : p2p_)[c.rank];
    if (slot.valid()) continue;
    slot = std::move(fd);
    --expected;
  }
}

// ---------------------------------------------------------------------------
// Failure detection
// ---------------------------------------------------------------------------

void Communicator::start_monitor() {
  if (size_ == 1) return;
  monitor_ = std::thread([this] { monitor_loop(); });
}

void Communicator::monitor_loop() {
  name_this_thread("flemu-comm");
  const int n = static_cast<int>(control_.size());
  std::vector<Notice> partial(n);
  std::vector<size_t> got(n, 0);
  std::vector<bool> open(n, false), departed(n, false);
  for (int i = 0; i < n; ++i) open[i] = control_[i].valid();
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> who;
    fds.push_back({monitor_stop_.get(), POLLIN, 0});
    who.push_back(-1);
    for (int i = 0; i < n; ++i) {
      if (!open[i]) continue;
      fds.push_back({control_[i].get(), POLLIN, 0});
      who.push_back(i);
    }
    if (fds.size() == 1) return;
    const int rc = ::poll(fds.data(), fds.size(), -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[0].revents & POLLIN) return;
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const int i = who[k];
      const int peer = rank_ == 0 ? i : 0;
      char* base = reinterpret_cast<char*>(&partial[i]);
      const ssize_t r = ::recv(control_[i].get(), base + got[i], sizeof(Notice) - got[i], 0);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r <= 0) {
        open[i] = false;
        if (departed[i]) continue;
        const std::string msg = cat("rank ", peer, " disconnected (its process exited or its connection broke)");
        if (set_error(TFL_ERR_UNAVAILABLE, msg) && rank_ == 0) notify_peers(TFL_ERR_UNAVAILABLE, msg, peer);
        continue;
      }
      got[i] += static_cast<size_t>(r);
      if (got[i] < sizeof(Notice)) continue;
      got[i] = 0;
      const Notice& note = partial[i];
      if (note.magic != kNoticeMagic) continue;
      if (note.kind == kBye) {
        departed[i] = true;
        continue;
      }
      std::string text(note.text, strnlen(note.text, sizeof(note.text)));
      if (set_error(note.code, text) && rank_ == 0) notify_peers(note.code, text, peer);
    }
  }
}

bool Communicator::set_error(int32_t code, std::string message) {
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (broken_.load()) return false;
    error_code_ = code;
    error_message_ = std::move(message);
    broken_.store(true);
  }
  error_cv_.notify_all();
  signal_eventfd(wake_.get());
  return true;
}

void Communicator::notify_peers(int32_t code, const std::string& message, int except_rank) {
  Notice note{};
  note.magic = kNoticeMagic;
  note.kind = kFail;
  note.origin = rank_;
  note.code = code;
  std::strncpy(note.text, message.c_str(), sizeof(note.text) - 1);
  std::lock_guard<std::mutex> lock(control_write_mu_);
  for (int i = 0; i < static_cast<int>(control_.size()); ++i) {
    const int peer = rank_ == 0 ? i : 0;
    if (!control_[i].valid() || peer == except_rank) continue;
    // Best effort and bounded: a notice is 256 bytes and the control
    // connection carries nothing else, so it normally goes out at once.
    try {
      write_all(control_[i].get(), &note, sizeof(note), now_ms() + 200, -1, rank_name(peer));
    } catch (const Error&) {
    }
  }
}

std::pair<int32_t, std::string> Communicator::error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!broken_.load()) return {TFL_OK, std::string()};
  return {error_code_, error_message_};
}

void Communicator::rethrow_broken(const OpContext* ctx) const {
  auto [code, message] = error();
  if (code == TFL_OK) {
    code = TFL_ERR_ABORTED;
    message = "the communicator was aborted";
  }
  if (ctx != nullptr) flemu::fail(code, cat(ctx->name, " (rank ", rank_, " of ", size_, ") failed: ", message));
  flemu::fail(code, cat("the communicator (rank ", rank_, " of ", size_, ") is unusable after an earlier failure: ",
                        message));
}

void Communicator::check_usable() const {
  if (destroyed_) invalid_argument("the communicator was destroyed");
  if (broken_.load()) rethrow_broken(nullptr);
}

void Communicator::fail(const OpContext& ctx, int32_t code, const std::string& what) {
  const std::string origin = cat("rank ", rank_, ": ", ctx.name, ": ", what);
  if (set_error(code, origin)) notify_peers(code, origin, -1);
  flemu::fail(code, cat(ctx.name, " (rank ", rank_, " of ", size_, ") failed: ", what));
}

void Communicator::peer_lost(const OpContext& ctx, int peer, const std::string& detail) {
  // A peer that closed its connection may only be reacting to a failure
  // elsewhere; rank 0's notice names the cause. Give it a moment to arrive.
  {
    std::unique_lock<std::mutex> lock(error_mu_);
    error_cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return broken_.load(); });
  }
  if (broken_.load()) rethrow_broken(&ctx);
  fail(ctx, TFL_ERR_UNAVAILABLE, cat("rank ", peer, " disconnected (", detail, ")"));
}

void Communicator::task_enqueued() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  ++pending_;
}

void Communicator::task_done() {
  std::lock_guard<std::mutex> lock(pending_mu_);
  if (--pending_ == 0) pending_cv_.notify_all();
}

// ---------------------------------------------------------------------------
// Exchange: many sends and receives progressing together
// ---------------------------------------------------------------------------

void Communicator::progress_send(Transfer& t, const OpContext& ctx) {
  for (;;) {
    const size_t limit = t.ready != nullptr ? std::min(*t.ready, t.len) : t.len;
    iovec iov[2];
    int niov = 0;
    if (t.header_done < sizeof(MsgHeader)) {
      iov[niov++] = {reinterpret_cast<char*>(&t.header) + t.header_done, sizeof(MsgHeader) - t.header_done};
    }
    if (t.done < limit) iov[niov++] = {t.data + t.done, limit - t.done};
    if (niov == 0) return;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(niov);
    const ssize_t n = ::sendmsg(t.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      peer_lost(ctx, t.peer, cat("send: ", std::strerror(errno)));
    }
    size_t left = static_cast<size_t>(n);
    const size_t h = std::min(left, sizeof(MsgHeader) - t.header_done);
    t.header_done += h;
    left -= h;
    t.done += left;
  }
}

void Communicator::progress_recv(Transfer& t, const OpContext& ctx) {
  while (t.header_done < sizeof(MsgHeader)) {
    const MsgHeader& got = t.header;  // the expectation
    MsgHeader& incoming = t.incoming;
    char* dst = reinterpret_cast<char*>(&incoming) + t.header_done;
    const ssize_t n = ::recv(t.fd, dst, sizeof(MsgHeader) - t.header_done, MSG_DONTWAIT);
    if (n == 0) peer_lost(ctx, t.peer, "connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      peer_lost(ctx, t.peer, cat("recv: ", std::strerror(errno)));
    }
    t.header_done += static_cast<size_t>(n);
    if (t.header_done < sizeof(MsgHeader)) return;
    if (incoming.magic != kMsgMagic)
      fail(ctx, TFL_ERR_INTERNAL, cat("corrupted data from rank ", t.peer, " (bad message header)"));
    if (incoming.kind != got.kind || incoming.seq != got.seq)
      fail(ctx, TFL_ERR_INVALID_ARGUMENT,
           cat("rank ", t.peer, " is in ", op_kind_name(static_cast<OpKind>(incoming.kind)), " #", incoming.seq,
               " while this rank is in ", op_kind_name(static_cast<OpKind>(got.kind)), " #", got.seq,
               ": every rank must call the operations of a communicator in the same order"));
    if (incoming.bytes != got.bytes || incoming.step != got.step)
      fail(ctx, TFL_ERR_INVALID_ARGUMENT,
           cat("rank ", t.peer, " sent ", incoming.bytes, " bytes for step ", incoming.step, " but this rank expected ",
               got.bytes, " bytes for step ", got.step, ": the ranks passed different counts or dtypes"));
  }
  while (t.done < t.len) {
    const ssize_t n = ::recv(t.fd, t.data + t.done, t.len - t.done, MSG_DONTWAIT);
    if (n == 0) peer_lost(ctx, t.peer, "connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      peer_lost(ctx, t.peer, cat("recv: ", std::strerror(errno)));
    }
    const size_t from = t.done;
    t.done += static_cast<size_t>(n);
    if (t.on_data) t.on_data(from, t.done);
  }
}

void Communicator::exchange(Transfer* ts, size_t n, const OpContext& ctx) {
  for (size_t i = 0; i < n; ++i) {
    Transfer& t = ts[i];
    const uint16_t step = t.step;
    const uint64_t bytes = t.len;
    t.header = MsgHeader{kMsgMagic, static_cast<uint16_t>(ctx.kind), step, ctx.seq, bytes};
    t.header_done = 0;
    t.done = 0;
  }
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  for (;;) {
    // Data that already arrived is used even when the communicator broke
    // meanwhile; only waiting for more is cut short.
    bool all_done = true;
    for (size_t i = 0; i < n; ++i) {
      Transfer& t = ts[i];
      if (t.finished()) continue;
      if (t.is_send) progress_send(t, ctx);
      else progress_recv(t, ctx);
      if (!t.finished()) all_done = false;
    }
    if (all_done) return;
    if (broken_.load()) rethrow_broken(&ctx);
    fds.clear();
    index.clear();
    for (size_t i = 0; i < n; ++i) {
      Transfer& t = ts[i];
      if (t.finished()) continue;
      if (t.is_send) {
        const size_t limit = t.ready != nullptr ? std::min(*t.ready, t.len) : t.len;
        if (t.header_done == sizeof(MsgHeader) && t.done >= limit) continue;  // waits for data to relay
        fds.push_back({t.fd, POLLOUT, 0});
      } else {
        fds.push_back({t.fd, POLLIN, 0});
      }
      index.push_back(i);
    }
    fds.push_back({wake_.get(), POLLIN, 0});
    const int64_t left = ctx.deadline_ms - now_ms();
    if (left <= 0) {
      std::string waiting;
      for (size_t i = 0; i < n; ++i) {
        const Transfer& t = ts[i];
        if (t.finished()) continue;
        waiting += cat(waiting.empty() ? "" : "; ", "rank ", t.peer,
                       t.is_send ? " has not taken " : " has not sent ", t.len - t.done, " of ", t.len, " bytes");
      }
      fail(ctx, TFL_ERR_TIMEOUT,
           cat("timed out after ", timeout_ms_, " ms: ", waiting,
               " (a rank that has not called the operation, is stuck, or died without closing its connections)"));
    }
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) fail(ctx, TFL_ERR_INTERNAL, cat("poll failed: ", std::strerror(errno)));
  }
}

char* Communicator::scratch(size_t bytes, int which) {
  std::vector<char>& s = scratch_[which];
  if (s.size() < bytes) {
    s.clear();
    s.shrink_to_fit();
    s.resize(bytes);
  }
  return s.data();
}

// ---------------------------------------------------------------------------
// Lifetime
// ---------------------------------------------------------------------------

void Communicator::destroy() {
  {
    std::unique_lock<std::mutex> lock(pending_mu_);
    pending_cv_.wait(lock, [&] { return pending_ == 0; });
  }
  if (destroyed_) return;
  destroyed_ = true;
  if (size_ > 1 && !aborted_.load()) {
    Notice bye{};
    bye.magic = kNoticeMagic;
    bye.kind = kBye;
    bye.origin = rank_;
    std::lock_guard<std::mutex> lock(control_write_mu_);
    for (auto& c : control_) {
      if (!c.valid()) continue;
      try {
        write_all(c.get(), &bye, sizeof(bye), now_ms() + 200, -1, "a peer");
      } catch (const Error&) {
      }
    }
  }
  signal_eventfd(monitor_stop_.get());
  if (monitor_.joinable()) monitor_.join();
  shm_.reset();
  for (auto* v : {&coll_, &p2p_, &control_})
    for (Fd& fd : *v) fd.reset();
}

void Communicator::abort() {
  aborted_.store(true);
  const std::string msg = cat("rank ", rank_, " aborted the communicator");
  if (set_error(TFL_ERR_ABORTED, msg) && size_ > 1) {
    Notice note{};
    note.magic = kNoticeMagic;
    note.kind = kFail;
    note.origin = rank_;
    note.code = TFL_ERR_ABORTED;
    std::strncpy(note.text, msg.c_str(), sizeof(note.text) - 1);
    // One non-blocking attempt per peer: abort never waits.
    std::unique_lock<std::mutex> lock(control_write_mu_, std::try_to_lock);
    if (lock.owns_lock())
      for (auto& c : control_)
        if (c.valid()) [[maybe_unused]] ssize_t n = ::send(c.get(), &note, sizeof(note), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Wake every blocked transfer here and at the peers; descriptors close
  // when the last reference goes, so a task still running never sees a
  // reused number.
  for (auto* v : {&coll_, &p2p_})
    for (Fd& fd : *v)
      if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
  signal_eventfd(monitor_stop_.get());
}

Communicator::~Communicator() {
  signal_eventfd(monitor_stop_.get());
  if (monitor_.joinable()) {
    if (monitor_.get_id() == std::this_thread::get_id()) monitor_.detach();
    else monitor_.join();
  }
}

}  // namespace flemu::comm
