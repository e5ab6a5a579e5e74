// libFuzzer target over the core's plan reader: plans are input too (connector/parse/native.py and the JVM's
// NativeParser write them, and a caller of the C ABI can give anything). The input up to its first 0x1E byte
// is the plan; the rest, cut at 0x1E bytes, are the bodies (checks.h), or when there are none a fixed set
// that reaches every kind of column and content. A plan is read (DSPARK_DONE, the result checked as the body
// target checks it) or refused with a message (DSPARK_BAD_PLAN); nothing else, no crash, no leak.
#include <cstdint>
#include <cstring>
#include <string>

#include "checks.h"

namespace {

const char kBodies[] =
    "{\"id\":\"a\",\"object\":\"chat.completion\",\"created\":1760000000,\"model\":\"m\",\"choices\":[{\"index\":0,"
    "\"message\":{\"role\":\"assistant\",\"content\":\"name: x n=12 x=1.5 ok=true j=[1] v=1 abc ac\"},"
    "\"finish_reason\":\"stop\",\"stop_reason\":7}],\"usage\":{\"prompt_tokens\":1,\"total_tokens\":3},"
    "\"metrics\":{\"tokens_per_second\":2.5}}"
    "\x1e{\"created\":\"2024-W05-3T10:00:00+01:00\",\"choices\":[{\"message\":{\"content\":"
    "\"```json\\n{\\\"a\\\":\\\"s\\\",\\\"b\\\":2,\\\"c\\\":1e3,\\\"language\\\":\\\"py\\\",\\\"steps\\\":[\\\"x\\\"],"
    "\\\"items_integer\\\":[1,2],\\\"boolean_first\\\":true}\\n```\"}}]}"
    "\x1e{\"choices\":[{\"text\":\"[1,2,{\\\"x\\\":null}]\",\"ok\":false,\"score\":0.5}],\"stream\":true}"
    "\x1e{\"error\":{\"message\":\"x\",\"code\":400}}"
    "\x1enot json\x1e[1]\x1e{\"created\":1e400}";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t plan_len = 0;
  while (plan_len < size && data[plan_len] != 0x1E) ++plan_len;
  // The plan in a heap buffer of exactly its size (no terminator: the core is given its length).
  std::unique_ptr<char[]> plan(new char[plan_len ? plan_len : 1]);
  std::memcpy(plan.get(), data, plan_len);
  Bodies bodies = plan_len < size ? cut(data + plan_len + 1, size - plan_len - 1)
                                  : cut(reinterpret_cast<const uint8_t*>(kBodies), sizeof kBodies - 1);
  parse_checked(plan.get(), plan_len, bodies, 0, bodies.offsets.size() - 1);
  return 0;
}
