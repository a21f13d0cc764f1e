#include "tracefs/kernel_enums.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>

namespace tpe {
namespace {
int SilentPrint(enum libbpf_print_level, const char*, va_list) { return 0; }
}  // namespace

KernelEnums KernelEnums::LoadFromKernel() {
  libbpf_set_print(SilentPrint);
  std::unordered_map<std::string, int64_t> values;
  struct btf* btf = btf__load_vmlinux_btf();
  if (btf == nullptr || libbpf_get_error(btf) != 0) return KernelEnums();
  const uint32_t n = btf__type_cnt(btf);
  for (uint32_t id = 1; id < n; ++id) {
    const struct btf_type* t = btf__type_by_id(btf, id);
    if (btf_is_enum(t)) {
      const struct btf_enum* e = btf_enum(t);
      for (uint16_t i = 0; i < btf_vlen(t); ++i) {
        values.emplace(btf__name_by_offset(btf, e[i].name_off), e[i].val);
      }
    } else if (btf_is_enum64(t)) {
      const struct btf_enum64* e = btf_enum64(t);
      for (uint16_t i = 0; i < btf_vlen(t); ++i) {
        values.emplace(btf__name_by_offset(btf, e[i].name_off), static_cast<int64_t>(btf_enum64_value(&e[i])));
      }
    }
  }
  btf__free(btf);
  return KernelEnums(std::move(values));
}

std::optional<int64_t> KernelEnums::Lookup(std::string_view name) const {
  auto it = values_.find(std::string(name));
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tpe
