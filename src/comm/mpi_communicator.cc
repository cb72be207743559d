// MpiCommunicator: collectives over MPI processes (see the header).
#include "terngrad/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "terngrad/core/error.h"

namespace tg {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error code {}", code);
  return fmt::format("{} ({})", std::string(text, len), code);
}

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

MpiEnvironment::MpiEnvironment() {
  int initialized = 0;
  TG_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    // SERIALIZED: a worker thread (not only the main one) may call MPI, one call at a time
    // (HierarchicalCommunicator's leader does).
    TG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    TG_CHECK(provided >= MPI_THREAD_SERIALIZED,
             "this MPI library provides thread level {}, terngrad needs MPI_THREAD_SERIALIZED ({})", provided,
             static_cast<int>(MPI_THREAD_SERIALIZED));
    owns_ = true;
    // Failures come back as return codes, turned into tg::Error by TG_MPI_CHECK, instead of aborting.
    TG_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
}

void MpiEnvironment::abort_all(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this only satisfies [[noreturn]]
}

MpiEnvironment::~MpiEnvironment() {
  if (!owns_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

int MpiEnvironment::world_rank() const {
  int r = 0;
  TG_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &r));
  return r;
}

int MpiEnvironment::world_size() const {
  int s = 0;
  TG_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &s));
  return s;
}

namespace {

// fp16 sum: inout[i] = half(float(in[i]) + float(inout[i])).
void half_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const half_bits* a = static_cast<const half_bits*>(in);
  half_bits* b = static_cast<half_bits*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = float_to_half(half_to_float(a[i]) + half_to_float(b[i]));
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::I8:
      return MPI_INT8_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::F16:
      return MPI_UINT16_T;  // reduced by half_sum_op only
    default:
      TG_THROW("MPI communicator: no MPI datatype for {}", dtype_name(t));
  }
}

void check_host(const std::string& who, Device device) {
  TG_CHECK(device.is_cpu(), "{}: buffers on {} are not supported (host memory only; use the NCCL communicator)", who,
           device.str());
}

// MPI counts are int: larger transfers go in chunks.
constexpr int64_t kMaxChunk = INT_MAX / 8;

}  // namespace

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op half_sum = MPI_OP_NULL;
};

MpiCommunicator::MpiCommunicator() : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  TG_MPI_CHECK(MPI_Initialized(&initialized));
  TG_CHECK(initialized, "MPI communicator: MPI is not initialised (create an MpiEnvironment first)");
  TG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm));
  // Errors come back as return codes (checked by TG_MPI_CHECK) instead of aborting the job.
  TG_MPI_CHECK(MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN));
  TG_MPI_CHECK(MPI_Comm_rank(impl_->comm, &rank_));
  TG_MPI_CHECK(MPI_Comm_size(impl_->comm, &size_));
  TG_MPI_CHECK(MPI_Op_create(&half_sum_op, 1, &impl_->half_sum));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (impl_->half_sum != MPI_OP_NULL) MPI_Op_free(&impl_->half_sum);
  if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::string MpiCommunicator::name() const { return fmt::format("mpi (rank {} of {})", rank_, size_); }

void MpiCommunicator::allreduce_impl(void* buffer, int64_t count, DType dtype, ReduceOp op, Device device) {
  check_host(name(), device);
  MPI_Op mop = dtype == DType::F16 ? impl_->half_sum : (op == ReduceOp::Sum ? MPI_SUM : MPI_MAX);
  MPI_Datatype type = mpi_type(dtype);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  for (int64_t done = 0; done < count;) {
    const int n = static_cast<int>(std::min<int64_t>(kMaxChunk, count - done));
    TG_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p + done * dtype_size(dtype), n, type, mop, impl_->comm));
    done += n;
  }
}

void MpiCommunicator::allgather_impl(const void* send, void* recv, size_t send_bytes, Device device) {
  check_host(name(), device);
  if (send_bytes <= static_cast<size_t>(kMaxChunk)) {
    TG_MPI_CHECK(MPI_Allgather(send, static_cast<int>(send_bytes), MPI_BYTE, recv, static_cast<int>(send_bytes),
                               MPI_BYTE, impl_->comm));
    return;
  }
  // MPI_Allgather counts are int; no model here comes near this size per rank, so refuse it clearly.
  TG_THROW("{}: all-gather of {} bytes per rank exceeds the supported {} bytes", name(), send_bytes, kMaxChunk);
}

void MpiCommunicator::broadcast_impl(void* buffer, size_t bytes, int root, Device device) {
  check_host(name(), device);
  uint8_t* p = static_cast<uint8_t*>(buffer);
  for (size_t done = 0; done < bytes;) {
    const int n = static_cast<int>(std::min<size_t>(kMaxChunk, bytes - done));
    TG_MPI_CHECK(MPI_Bcast(p + done, n, MPI_BYTE, root, impl_->comm));
    done += n;
  }
}

void MpiCommunicator::barrier_impl() { TG_MPI_CHECK(MPI_Barrier(impl_->comm)); }

}  // namespace tg
