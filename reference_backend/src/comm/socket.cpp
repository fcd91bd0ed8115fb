#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "interrupt.h"
#include "../errors.h"

namespace flemu::comm {

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Endpoint::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == AF_INET6) {
    inet_ntop(AF_INET6, addr, buf, sizeof(buf));
    return cat("[", buf, "]:", port);
  }
  inet_ntop(AF_INET, addr, buf, sizeof(buf));
  return cat(buf, ":", port);
}

sockaddr_storage Endpoint::to_sockaddr(socklen_t* len) const {
  sockaddr_storage ss{};
  if (family == AF_INET6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(port);
    std::memcpy(&sa->sin6_addr, addr, 16);
    *len = sizeof(sockaddr_in6);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    std::memcpy(&sa->sin_addr, addr, 4);
    *len = sizeof(sockaddr_in);
  }
  return ss;
}

Endpoint Endpoint::from_sockaddr(const sockaddr* sa) {
  Endpoint ep;
  if (sa->sa_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ep.family = AF_INET6;
    ep.port = ntohs(s6->sin6_port);
    std::memcpy(ep.addr, &s6->sin6_addr, 16);
  } else {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
    ep.family = AF_INET;
    ep.port = ntohs(s4->sin_port);
    std::memcpy(ep.addr, &s4->sin_addr, 4);
  }
  return ep;
}

namespace {

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  return true;
}

Endpoint loopback() {
  Endpoint ep;
  ep.family = AF_INET;
  const uint32_t a = htonl(INADDR_LOOPBACK);
  std::memcpy(ep.addr, &a, 4);
  return ep;
}

// Waits until `fd` is ready for `events` or the wake descriptor fires.
// Returns false when the deadline passed first.
bool wait_ready(int fd, short events, int64_t deadline_ms, int wake_fd) {
  for (;;) {
    const int64_t left = deadline_ms - now_ms();
    if (left <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    const int n = ::poll(fds, wake_fd >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      flemu::fail(TFL_ERR_INTERNAL, cat("poll failed: ", std::strerror(errno)));
    }
    if (wake_fd >= 0 && (fds[1].revents & POLLIN)) throw Interrupted();
    if (fds[0].revents != 0) return true;
  }
}

}  // namespace

Endpoint advertised_host() {
  if (const char* host = std::getenv("FLEMU_COMM_HOST"); host != nullptr && *host != '\0') {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(host, nullptr, &hints, &res);
    if (rc != 0 || res == nullptr)
      flemu::fail(TFL_ERR_INVALID_ARGUMENT,
                  cat("FLEMU_COMM_HOST='", host, "' does not resolve: ", gai_strerror(rc),
                      " (set it to an address of this host that the other ranks can reach)"));
    Endpoint ep = Endpoint::from_sockaddr(res->ai_addr);
    freeaddrinfo(res);
    return ep;
  }
  const char* ifname = std::getenv("FLEMU_COMM_IFNAME");
  const bool want_if = ifname != nullptr && *ifname != '\0';
  ifaddrs* ifs = nullptr;
  Endpoint chosen = loopback();
  bool found = false;
  if (getifaddrs(&ifs) == 0) {
    // IPv4 first: it is what most clusters route between hosts.
    for (int pass = 0; pass < 2 && !found; ++pass) {
      const int family = pass == 0 ? AF_INET : AF_INET6;
      for (ifaddrs* it = ifs; it != nullptr; it = it->ifa_next) {
        if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != family) continue;
        if (!(it->ifa_flags & IFF_UP)) continue;
        if (want_if) {
          if (std::strcmp(it->ifa_name, ifname) != 0) continue;
        } else if ((it->ifa_flags & IFF_LOOPBACK) || is_loopback(it->ifa_addr)) {
          continue;
        }
        if (family == AF_INET6 &&
            IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(it->ifa_addr)->sin6_addr))
          continue;
        chosen = Endpoint::from_sockaddr(it->ifa_addr);
        found = true;
        break;
      }
    }
    freeifaddrs(ifs);
  }
  if (want_if && !found)
    flemu::fail(TFL_ERR_INVALID_ARGUMENT,
                cat("FLEMU_COMM_IFNAME='", ifname, "' names no interface that is up with an IP address"));
  chosen.port = 0;
  return chosen;
}

void configure_stream_socket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

Fd listen_any(uint16_t family, Endpoint* bound) {
  Fd fd(::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) flemu::fail(TFL_ERR_UNAVAILABLE, cat("cannot create a TCP socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_addr = in6addr_any;
    len = sizeof(sockaddr_in6);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof(sockaddr_in);
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0)
    flemu::fail(TFL_ERR_UNAVAILABLE, cat("cannot bind a TCP socket: ", std::strerror(errno)));
  if (::listen(fd.get(), 1024) != 0)
    flemu::fail(TFL_ERR_UNAVAILABLE, cat("cannot listen on a TCP socket: ", std::strerror(errno)));
  len = sizeof(ss);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  *bound = Endpoint::from_sockaddr(reinterpret_cast<sockaddr*>(&ss));
  return fd;
}

Fd connect_to(const Endpoint& ep, int64_t deadline_ms, int wake_fd, const std::string& who) {
  int last_error = 0;
  int64_t backoff_ms = 1;
  while (now_ms() < deadline_ms) {
    Fd fd(::socket(ep.family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) flemu::fail(TFL_ERR_UNAVAILABLE, cat("cannot create a TCP socket: ", std::strerror(errno)));
    socklen_t len;
    sockaddr_storage ss = ep.to_sockaddr(&len);
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_ready(fd.get(), POLLOUT, deadline_ms, wake_fd)) break;
      int err = 0;
      socklen_t elen = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      configure_stream_socket(fd.get());
      return fd;
    }
    last_error = errno;
    if (last_error != ECONNREFUSED && last_error != ETIMEDOUT && last_error != EAGAIN &&
        last_error != ECONNRESET && last_error != EHOSTUNREACH && last_error != ENETUNREACH)
      flemu::fail(TFL_ERR_UNAVAILABLE, cat("cannot connect to ", who, " at ", ep.str(), ": ", std::strerror(last_error)));
    // The peer may not be listening yet: retry with a short backoff.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<int64_t>(backoff_ms, deadline_ms - now_ms())));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 100);
  }
  flemu::fail(TFL_ERR_TIMEOUT, cat("timed out connecting to ", who, " at ", ep.str(),
                                   last_error != 0 ? cat(" (last error: ", std::strerror(last_error), ")") : ""));
}

Fd accept_until(int listen_fd, int64_t deadline_ms, int wake_fd) {
  for (;;) {
    if (!wait_ready(listen_fd, POLLIN, deadline_ms, wake_fd)) return Fd();
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.valid()) {
      configure_stream_socket(fd.get());
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      flemu::fail(TFL_ERR_UNAVAILABLE, cat("accept failed: ", std::strerror(errno)));
  }
}

void write_all(int fd, const void* data, size_t len, int64_t deadline_ms, int wake_fd, const std::string& who) {
  const char* p = static_cast<const char*>(data);
  while (len > 0) {
    const ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline_ms, wake_fd))
        flemu::fail(TFL_ERR_TIMEOUT, cat("timed out sending to ", who));
      continue;
    }
    flemu::fail(TFL_ERR_UNAVAILABLE, cat(who, " disconnected (send: ", std::strerror(errno), ")"));
  }
}

void read_all(int fd, void* data, size_t len, int64_t deadline_ms, int wake_fd, const std::string& who) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    const ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) flemu::fail(TFL_ERR_UNAVAILABLE, cat(who, " disconnected (connection closed)"));
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline_ms, wake_fd))
        flemu::fail(TFL_ERR_TIMEOUT, cat("timed out waiting for ", who));
      continue;
    }
    flemu::fail(TFL_ERR_UNAVAILABLE, cat(who, " disconnected (recv: ", std::strerror(errno), ")"));
  }
}

}  // namespace flemu::comm
