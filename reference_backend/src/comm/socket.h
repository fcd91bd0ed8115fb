// TCP sockets for flemu's communication library: an owning descriptor,
// addresses, and connect/accept/read/write helpers that honour a deadline.
//
// Every socket is non-blocking; the helpers poll, so no call can block past
// its deadline, and a `wake` descriptor (an eventfd the communicator signals
// on abort or on a peer's failure) interrupts any wait.
#ifndef FLEMU_COMM_SOCKET_H_
#define FLEMU_COMM_SOCKET_H_

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace flemu::comm {

// An owned file descriptor; closes on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 endpoint, stored in the fixed form the unique id and the
// rank table carry.
struct Endpoint {
  uint16_t family = 0;    // AF_INET or AF_INET6
  uint16_t port = 0;      // host byte order
  uint8_t addr[16] = {};  // IPv4 uses the first 4 bytes

  std::string str() const;  // "10.0.0.1:4242" or "[::1]:4242"
  sockaddr_storage to_sockaddr(socklen_t* len) const;
  static Endpoint from_sockaddr(const sockaddr* sa);
};

// Steady-clock milliseconds.
int64_t now_ms();

// The address this host advertises to peers: FLEMU_COMM_HOST (a literal
// address or a name), else the first non-loopback address of
// FLEMU_COMM_IFNAME or of any interface that is up, else 127.0.0.1.
Endpoint advertised_host();

// A listening TCP socket on all interfaces of `family`, any free port.
Fd listen_any(uint16_t family, Endpoint* bound);

// Connects to `ep`, retrying refused connections until `deadline_ms`.
// Throws TFL_ERR_TIMEOUT / TFL_ERR_UNAVAILABLE naming `who`.
Fd connect_to(const Endpoint& ep, int64_t deadline_ms, int wake_fd, const std::string& who);

// Accepts one connection; returns an invalid Fd when `deadline_ms` passes.
Fd accept_until(int listen_fd, int64_t deadline_ms, int wake_fd);

// Writes / reads exactly `len` bytes before `deadline_ms`. Throw
// TFL_ERR_TIMEOUT, or TFL_ERR_UNAVAILABLE when the peer closed the
// connection; `who` names the peer in the message.
void write_all(int fd, const void* data, size_t len, int64_t deadline_ms, int wake_fd, const std::string& who);
void read_all(int fd, void* data, size_t len, int64_t deadline_ms, int wake_fd, const std::string& who);

// TCP_NODELAY, keep-alive, close-on-exec and non-blocking mode.
void configure_stream_socket(int fd);

}  // namespace flemu::comm

#endif  // FLEMU_COMM_SOCKET_H_
