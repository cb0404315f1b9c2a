// MLX's distributed layer (mlx/distributed): one process group per process, made by MLX's own
// backends (the ring backend over TCP reads MLX_RANK and MLX_HOSTFILE; MPI its own launcher's
// environment), and the communication ops as lazy graph nodes. The ring backend runs its ops on a CPU
// stream (the JS thread's default one, or the one setDefaultStream chose), and a stream runs its work
// in the order it was scheduled: to pass a tensor to a peer and then wait for another, schedule the
// send before building the receive.
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

}  // namespace

void RegisterDistributed(Napi::Env env, Napi::Object exports) {
  exports.Set("distributedAvailable", Fn<DistributedAvailable>(env, "distributedAvailable"));
  exports.Set("distributedInit", Fn<DistributedInit>(env, "distributedInit"));
  exports.Set("distributedGroup", Fn<DistributedGroup>(env, "distributedGroup"));
  exports.Set("distributedSend", Fn<DistributedSend>(env, "distributedSend"));
  exports.Set("distributedRecv", Fn<DistributedRecv>(env, "distributedRecv"));
  exports.Set("distributedAllSum", Fn<DistributedAllSum>(env, "distributedAllSum"));
  exports.Set("distributedAllGather", Fn<DistributedAllGather>(env, "distributedAllGather"));
}

}  // namespace rmlx
