// libFuzzer target over the core's one C ABI entry point (native/dspark_core.h), built with ASan and UBSan
// by native/fuzz/run.sh. The first byte picks a plan (native/fuzz/plans.py: the project's profiles, and plans
// for every column kind, conversion and limit); the rest is cut into bodies at each 0x1E byte (checks.h). The
// exported arrays are checked for their shape and released: LeakSanitizer reports whatever they did not
// free. With "explain", every body is a row or has a reason (UTF-8 text), except one refused by its size,
// and no content is left deferred. A plan with a small max_column_bytes is read in halves, as callers do.
#include <cstdint>
#include <cstring>

#include "checks.h"
#include "plans.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const char* plan = kPlans[data[0] % (sizeof kPlans / sizeof kPlans[0])];
  Bodies bodies = cut(data + 1, size - 1);
  int32_t code = parse_checked(plan, std::strlen(plan), bodies, 0, bodies.offsets.size() - 1);
  check(code != DSPARK_BAD_PLAN, "a plan of the project refused");
  return 0;
}
