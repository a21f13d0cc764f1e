#include "bpf/image_stamps.h"

#include <memory>
#include <mutex>

#include "bpf/assembler.h"
#include "bpf/map_access.h"

namespace tpe::bpf {
namespace {

constexpr int16_t kKey = -8, kValue = -16;

// stamps[*(u32*)(R10 + kKey)] = bpf_ktime_get_ns(), then return 0.
void EmitStamp(Assembler* a, int map_fd) {
  a->Call(BPF_FUNC_ktime_get_ns);
  a->Store(8, R10, kValue, R0);
  a->LoadMapFd(R1, map_fd);
  a->MovReg(R2, R10);
  a->Alu(BPF_ADD, R2, kKey);
  a->MovReg(R3, R10);
  a->Alu(BPF_ADD, R3, kValue);
  a->Mov(R4, BPF_ANY);
  a->Call(BPF_FUNC_map_update_elem);
  a->Mov(R0, 0);
  a->Exit();
}

std::vector<bpf_insn> Finished(const Assembler& a) {
  auto insns = a.Finish();
  return insns.ok() ? std::move(insns).value() : std::vector<bpf_insn>{};
}

}  // namespace

std::vector<bpf_insn> ImageStamps::ExecProgram(int map_fd) {
  Assembler a;
  a.StoreImm(8, R10, kKey, 0);
  a.Call(BPF_FUNC_get_current_pid_tgid);
  a.Alu(BPF_RSH, R0, 32);
  a.Store(4, R10, kKey, R0);
  EmitStamp(&a, map_fd);
  return Finished(a);
}

std::vector<bpf_insn> ImageStamps::ForkProgram(int map_fd, uint32_t child_pid_offset) {
  Assembler a;
  a.StoreImm(8, R10, kKey, 0);
  a.Load(4, R0, R1, static_cast<int16_t>(child_pid_offset));  // the record's child_pid
  a.Store(4, R10, kKey, R0);
  EmitStamp(&a, map_fd);
  return Finished(a);
}

uint64_t ImageStamps::map_bytes() const {
  // htab_map_alloc preallocates an LRU hash: per element its htab_elem (~48 bytes) with the key
  // rounded to 8 and the value.
  return uint64_t{kMaxEntries} * (48 + 8 + 8);
}

StatusOr<const ImageStamps*> ImageStamps::Get(uint64_t exec_id, uint64_t fork_id, uint32_t child_pid_offset) {
  static std::mutex mu;
  static const ImageStamps* made = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (made != nullptr) return made;
  if (child_pid_offset > 4096) return InvalidArgument("sched_process_fork's child_pid offset is past its record");
  std::unique_ptr<ImageStamps> s(new ImageStamps());
  TPE_ASSIGN_OR_RETURN(s->map_, CreateMap(BPF_MAP_TYPE_LRU_HASH, "tpe_image_stamp", 4, 8, kMaxEntries));
  TPE_ASSIGN_OR_RETURN(s->exec_prog_, LoadTracepointProgram("tpe_stamp_exec", ExecProgram(s->map_.get())));
  TPE_ASSIGN_OR_RETURN(s->fork_prog_,
                       LoadTracepointProgram("tpe_stamp_fork", ForkProgram(s->map_.get(), child_pid_offset)));
  TPE_ASSIGN_OR_RETURN(s->exec_, AttachTracepoint(s->exec_prog_.get(), exec_id));
  TPE_ASSIGN_OR_RETURN(s->fork_, AttachTracepoint(s->fork_prog_.get(), fork_id));
  made = s.release();  // for the process's life: profile programs read the map as long as they run
  return made;
}

}  // namespace tpe::bpf
