// MLX's distributed layer (mlx/distributed): one process group per process, made by MLX's own
// backends (the ring backend over TCP reads MLX_RANK and MLX_HOSTFILE; MPI its own launcher's
// environment), and the communication ops as lazy graph nodes. The ring backend runs its ops on a CPU
// stream (the JS thread's default one, or the one setDefaultStream chose), and a stream runs its work
// in the order it was scheduled: to pass a tensor to a peer and then wait for another, schedule the
// send before building the receive.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <mutex>

#include "common.h"

namespace rmlx {

namespace {

// The group made by distributedInit (MLX itself also caches it per backend).
std::optional<mx::distributed::Group>& StoredGroup() {
  static std::optional<mx::distributed::Group> group;
  return group;
}

const mx::distributed::Group& GroupOrThrow(const char* op) {
  auto& g = StoredGroup();
  if (!g) throw std::runtime_error(std::string(op) + ": no distributed group; call distributedInit first");
  return *g;
}

Napi::Object GroupInfo(Napi::Env env, const mx::distributed::Group& g) {
  Napi::Object out = Napi::Object::New(env);
  out.Set("rank", Napi::Number::New(env, g.rank()));
  out.Set("size", Napi::Number::New(env, g.size()));
  return out;
}

// distributedAvailable(backend) -> whether this libmlx has that backend ("ring", "mpi", "any"...).
Napi::Value DistributedAvailable(const Napi::CallbackInfo& info) {
  Args args(info, "distributedAvailable");
  return Napi::Boolean::New(info.Env(), mx::distributed::is_available(args.string(0, "backend", "any")));
}

// distributedInit(backend) -> Promise<{ rank, size }>. Joining blocks until the peers connect (the
// ring backend accepts without a deadline), so it runs on a detached thread: the TS layer races it
// against its own timeout.
Napi::Value DistributedInit(const Napi::CallbackInfo& info) {
  Args args(info, "distributedInit");
  std::string backend = args.string(0, "backend", "ring");
  auto made = std::make_shared<std::optional<mx::distributed::Group>>();
  return RunDetached(
      info.Env(), "runtime-mlx:distributedInit",
      [backend, made] { made->emplace(mx::distributed::init(/* strict */ true, backend)); },
      [made](Napi::Env env) -> Napi::Value {
        StoredGroup() = **made;
        return GroupInfo(env, **made);
      });
}

// distributedGroup() -> { rank, size } | null
Napi::Value DistributedGroup(const Napi::CallbackInfo& info) {
  auto& g = StoredGroup();
  return g ? Napi::Value(GroupInfo(info.Env(), *g)) : info.Env().Null();
}

int PeerArg(const Args& args, size_t i, const char* name, const mx::distributed::Group& g) {
  int peer = args.integer(i, name);
  if (peer < 0 || peer >= g.size() || peer == g.rank()) {
    args.fail(i, name, "another rank of the group (0.." + std::to_string(g.size() - 1) + ", not " +
                           std::to_string(g.rank()) + ")");
  }
  return peer;
}

// distributedSend(x, dst) -> the send's output (evaluating it performs the send)
Napi::Value DistributedSend(const Napi::CallbackInfo& info) {
  Args args(info, "distributedSend");
  const auto& g = GroupOrThrow("distributedSend");
  return Wrap(info.Env(), mx::distributed::send(args.array(0, "x"), PeerArg(args, 1, "dst", g), g));
}

// distributedRecv(shape, dtype, src) -> the received array (evaluating it waits for the peer)
Napi::Value DistributedRecv(const Napi::CallbackInfo& info) {
  Args args(info, "distributedRecv");
  const auto& g = GroupOrThrow("distributedRecv");
  return Wrap(info.Env(),
              mx::distributed::recv(args.shape(0, "shape"), args.dtype(1, "dtype"), PeerArg(args, 2, "src", g), g));
}

// distributedAllSum(x) -> the elementwise sum over every rank
Napi::Value DistributedAllSum(const Napi::CallbackInfo& info) {
  Args args(info, "distributedAllSum");
  return Wrap(info.Env(), mx::distributed::all_sum(args.array(0, "x"), GroupOrThrow("distributedAllSum")));
}

// distributedAllGather(x) -> every rank's x concatenated along axis 0, in rank order
Napi::Value DistributedAllGather(const Napi::CallbackInfo& info) {
  Args args(info, "distributedAllGather");
  return Wrap(info.Env(), mx::distributed::all_gather(args.array(0, "x"), GroupOrThrow("distributedAllGather")));
}

// The sockets this process accepted on its ring ports (from the previous rank): connected TCP
// sockets whose local port is one of `ports`. MLX does not expose them; they are found once, by fd.
std::vector<int> AcceptedSockets(const std::vector<int>& ports) {
  static std::mutex mu;
  static std::vector<int> found;
  std::lock_guard<std::mutex> lock(mu);
  if (!found.empty()) return found;
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  // MLX opens its sockets early, among the first descriptors; Node may raise the limit to millions
  const int limit = static_cast<int>(std::min<rlim_t>(rl.rlim_cur, 65536));
  for (int fd = 0; fd < limit; fd++) {
    int type = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;  // not connected
    int port = -1;
    if (local.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
    if (local.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
    if (std::find(ports.begin(), ports.end(), port) != ports.end()) found.push_back(fd);
  }
  return found;
}

// distributedWaitReadable(ports, timeoutMs) -> Promise<boolean | null>: waits (poll, no CPU) until a
// socket accepted on one of this rank's ring ports has data or was closed; true then, false after
// timeoutMs, null when no such socket is found (another backend). MLX's ring worker polls in a loop
// while a receive is pending, so a rank that waits for the next step posts its receive only once
// this says the data is there.
Napi::Value DistributedWaitReadable(const Napi::CallbackInfo& info) {
  Args args(info, "distributedWaitReadable");
  std::vector<int> ports = args.ints(0, "ports");
  int timeout = args.integer(1, "timeoutMs");
  auto result = std::make_shared<int>(0);
  return RunDetached(
      info.Env(), "runtime-mlx:distributedWaitReadable",
      [ports, timeout, result] {
        std::vector<int> fds = AcceptedSockets(ports);
        if (fds.empty()) {
          *result = -1;
          return;
        }
        std::vector<pollfd> p;
        for (int fd : fds) p.push_back(pollfd{fd, POLLIN, 0});
        int n = ::poll(p.data(), p.size(), timeout);
        *result = n > 0 ? 1 : 0;
      },
      [result](Napi::Env env) -> Napi::Value {
        if (*result < 0) return env.Null();
        return Napi::Boolean::New(env, *result == 1);
      });
}

}  // namespace

void RegisterDistributed(Napi::Env env, Napi::Object exports) {
  exports.Set("distributedAvailable", Fn<DistributedAvailable>(env, "distributedAvailable"));
  exports.Set("distributedInit", Fn<DistributedInit>(env, "distributedInit"));
  exports.Set("distributedGroup", Fn<DistributedGroup>(env, "distributedGroup"));
  exports.Set("distributedSend", Fn<DistributedSend>(env, "distributedSend"));
  exports.Set("distributedRecv", Fn<DistributedRecv>(env, "distributedRecv"));
  exports.Set("distributedAllSum", Fn<DistributedAllSum>(env, "distributedAllSum"));
  exports.Set("distributedAllGather", Fn<DistributedAllGather>(env, "distributedAllGather"));
  exports.Set("distributedWaitReadable", Fn<DistributedWaitReadable>(env, "distributedWaitReadable"));
}

}  // namespace rmlx
