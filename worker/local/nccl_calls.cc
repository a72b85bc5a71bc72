// The NCCL backend's stateless CUDA and NCCL calls: see nccl_calls.h.

#include "worker/local/nccl_calls.h"

#include "common/util/status.h"

namespace ferry {

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
  }
  throw FerryError(ErrorCode::kInvalidArgument, StrCat("no NCCL type for ", DataTypeName(t)));
}

std::string CudaText(cudaError_t r) {
  cudaGetLastError();  // a non-sticky error must not resurface in a later call
  return StrCat(cudaGetErrorName(r), " (", cudaGetErrorString(r), ")");
}

void CheckCuda(cudaError_t r, const char* call, const std::string& who) {
  if (r == cudaSuccess) return;
  throw FerryError(ErrorCode::kInternal,
                   StrCat(who, ": CUDA call ", call, " failed: ", CudaText(r)));
}

void CheckNccl(ncclResult_t r, const char* call, ncclComm_t comm, const std::string& who) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  throw FerryError(ErrorCode::kInternal,
                   StrCat(who, ": NCCL call ", call, " failed: ", ncclGetErrorString(r), " (",
                          static_cast<int>(r), ")",
                          last != nullptr && *last != 0 ? StrCat(": ", last) : std::string()));
}

int CheckTensor(const DeviceTensor& t, const std::string& who) {
  int devices = 0;
  const cudaError_t r = cudaGetDeviceCount(&devices);
  FERRY_ENFORCE(r == cudaSuccess && devices > 0, ErrorCode::kInvalidArgument, who,
                ": push_pull of device tensor '", t.name, "': no usable GPU here (",
                r == cudaSuccess ? std::string("no CUDA device") : CudaText(r), ")");
  if (t.count == 0) {
    int current = 0;
    CheckCuda(cudaGetDevice(&current), "cudaGetDevice", who);
    return current;
  }
  int device = -1;
  for (const void* p : {t.input, static_cast<const void*>(t.output)}) {
    cudaPointerAttributes attr;
    const cudaError_t a = cudaPointerGetAttributes(&attr, p);
    FERRY_ENFORCE(a == cudaSuccess &&
                      (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged),
                  ErrorCode::kInvalidArgument, who, ": push_pull of device tensor '", t.name,
                  "': ", p == t.input ? "input" : "output", " ", p, " is not CUDA device memory",
                  a == cudaSuccess ? std::string() : StrCat(" (", CudaText(a), ")"));
    FERRY_ENFORCE(device < 0 || attr.device == device, ErrorCode::kInvalidArgument, who,
                  ": push_pull of device tensor '", t.name, "': input on GPU ", device,
                  ", output on GPU ", attr.device);
    device = attr.device;
  }
  return device;
}

cudaEvent_t RecordReady(const DeviceTensor& t, int device, const std::string& who) {
  int current = 0;
  CheckCuda(cudaGetDevice(&current), "cudaGetDevice", who);
  if (current != device) CheckCuda(cudaSetDevice(device), "cudaSetDevice", who);
  cudaEvent_t ready = nullptr;
  cudaError_t r = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (r == cudaSuccess) r = cudaEventRecord(ready, static_cast<cudaStream_t>(t.stream));
  if (current != device) cudaSetDevice(current);
  if (r != cudaSuccess && ready != nullptr) cudaEventDestroy(ready);
  CheckCuda(r, "cudaEventRecord (on the caller's stream)", who);
  return ready;
}

std::string NewUniqueId(const std::string& who) {
  ncclUniqueId id;
  CheckNccl(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr, who);
  return std::string(id.internal, sizeof id.internal);
}

}  // namespace ferry
