// dspark-vllm's native parser core (see dspark_core.h). simdjson On-Demand, one pass per body: every
// value of the body is visited (so every rule of docs/json.md is checked on the whole text, fields no
// column reads included), and the values on the plan's paths are written into Arrow builders.
//
// The fast pass only says yes when it is sure to give what the exact path (tests/oracle/exact.py) gives;
// with the plan's "explain" (every caller's) the bodies it leaves go to the slow path (dspark_exact.cpp, the
// exact path in C++), which gives the row or the reason byte for byte as exact.py would; without it, a verdict
// leaves them to the caller. Memory: std containers, moved into the exported arrays, freed by their release
// callbacks.

#include "dspark_core.h"
#include "dspark_exact.h"
#include "dspark_extract.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>  // malloc_trim
#endif

#include "simdjson.h"

namespace {

using namespace simdjson;

constexpr int kDepthLimit = DSPARK_DEPTH_LIMIT;
constexpr int kMaxEntries = 16;  // trie nodes one value can stand for (paths through "0" and "*" of one array)
constexpr int64_t kMsMin = -62135596800000LL, kMsMax = 253402300799999LL;  // years 1..9999
constexpr int64_t kStringMax = 2147483647LL;

// The kinds a plan names (dspark_contract.h, declared in native/contract.py), then the core's own probes.
#define DSPARK_KIND_ENUM(name, KIND) K_##KIND,
enum Kind : uint8_t { DSPARK_KINDS(DSPARK_KIND_ENUM) K_PROBE_ERROR, K_PROBE_OBJECT };
#undef DSPARK_KIND_ENUM
enum Unit : uint8_t { U_SECONDS, U_MILLIS, U_ISO };

struct Val {
  enum Tag : uint8_t { NONE, STR, INT, DBL, BOOL } tag = NONE;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  std::string_view s;
};

// -- the plan: paths as a trie of names, "0" (first element) and "*" (every element) -------------------

struct Node {
  std::vector<std::pair<std::string, int>> keys;
  int first = -1, every = -1;
  std::vector<int> slots;
};

struct Slot {
  Kind kind;
  bool star;
};

struct Shape {
  std::vector<Node> nodes{Node{}};
  std::vector<Slot> slots;

  int child(int node, const std::string& segment, bool literal_star = false) {
    if (segment == "0" || (segment == "*" && !literal_star)) {
      // An index, not a reference into `nodes`: emplace_back may move the nodes (found by the fuzz target).
      int to = segment == "0" ? nodes[node].first : nodes[node].every;
      if (to < 0) {
        to = static_cast<int>(nodes.size());
        (segment == "0" ? nodes[node].first : nodes[node].every) = to;
        nodes.emplace_back();
      }
      return to;
    }
    for (auto& [name, to] : nodes[node].keys)
      if (name == segment) return to;
    int to = static_cast<int>(nodes.size());
    nodes[node].keys.emplace_back(segment, to);
    nodes.emplace_back();
    return to;
  }

  // The slot at the end of `path`, and (through `star_parent`) the node whose array '*' walks.
  // A length column's path is walked as the reference walks it: a "*" there is a name (exact.py's _walk).
  int add(const std::vector<std::string>& path, Kind kind, int* star_parent) {
    int node = 0;
    bool star = false;
    const bool literal_star = kind == K_LENGTH;
    for (const auto& segment : path) {
      if (segment == "*" && !literal_star) {
        star = true;
        if (star_parent) *star_parent = node;
      }
      node = child(node, segment, literal_star);
    }
    int slot = static_cast<int>(slots.size());
    slots.push_back({kind, star});
    nodes[node].slots.push_back(slot);
    return slot;
  }
};

struct Scratch {
  std::vector<Val> single;
  std::vector<std::vector<std::pair<int64_t, Val>>> multi;
  std::vector<int64_t> length;  // per node: elements of the array met there, -1 when none

  std::vector<int> touched;  // the slots written since the last reset
  std::vector<std::string> text;  // per slot: the JSON text of a JSON-kind value

  void reset(const Shape& shape) {
    if (single.size() != shape.slots.size()) {
      single.assign(shape.slots.size(), Val{});
      multi.assign(shape.slots.size(), {});
      length.assign(shape.nodes.size(), -1);
      text.assign(shape.slots.size(), {});
      touched.clear();
      return;
    }
    for (int slot : touched) {
      single[slot].tag = Val::NONE;
      multi[slot].clear();
    }
    touched.clear();
    std::fill(length.begin(), length.end(), -1);
  }
};

// -- memory for the builders' buffers ---------------------------------------------------------------------

// Large buffers are kept when the arrays made of them are released, for the next batch: otherwise each
// batch's ~30 buffers are fresh pages (glibc maps blocks this large anew and trims its heap on free), and a
// fifth of a batch's time went to the kernel's page faults (perf, a 10k batch). Blocks from 64 KiB, sized in
// powers of two; at most kPoolHeld bytes are kept, the rest freed. Any thread may release an array.
class BufferPool {
 public:
  static constexpr size_t kSmallest = size_t{64} << 10;
  static constexpr size_t kPoolHeld = size_t{64} << 20;

  static size_t block_size(size_t bytes) {
    size_t size = kSmallest;
    while (size < bytes) size <<= 1;
    return size;
  }

  void* take(size_t bytes) {
    if (bytes < kSmallest) return ::operator new(bytes);
    size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end()) {
        void* block = it->second;
        free_.erase(it);
        held_ -= size;
        return block;
      }
    }
    return ::operator new(size);
  }

  void give(void* block, size_t bytes) {
    if (bytes < kSmallest) return ::operator delete(block);
    size_t size = block_size(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (held_ + size <= kPoolHeld) {
        free_.emplace(size, block);
        held_ += size;
        return;
      }
    }
    ::operator delete(block);
  }

 private:
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  size_t held_ = 0;
};

BufferPool& buffer_pool() {
  static BufferPool* pool = new BufferPool();  // never destroyed: arrays may be released at exit
  return *pool;
}

// A growable array of plain values in pooled memory: an Arrow buffer under construction. (A std::vector with
// a custom allocator moves its elements one by one when it grows: a tenth of a batch's time, in perf.)
template <typename T>
class PodBuffer {
  static_assert(std::is_trivially_copyable<T>::value, "plain values only");

 public:
  PodBuffer() = default;
  PodBuffer(const PodBuffer&) = delete;
  PodBuffer& operator=(const PodBuffer&) = delete;
  ~PodBuffer() {
    if (data_) buffer_pool().give(data_, capacity_ * sizeof(T));
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  T& back() { return data_[size_ - 1]; }
  const T& back() const { return data_[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    T* grown = static_cast<T*>(buffer_pool().take(n * sizeof(T)));
    if (size_) std::memcpy(grown, data_, size_ * sizeof(T));
    if (data_) buffer_pool().give(data_, capacity_ * sizeof(T));
    data_ = grown;
    capacity_ = n;
  }
  void push_back(T v) {
    if (size_ == capacity_) reserve(capacity_ ? 2 * capacity_ : 16);
    data_[size_++] = v;
  }
  void append(const T* values, size_t n) {
    if (size_ + n > capacity_) reserve(std::max(size_ + n, 2 * capacity_));
    if (n) std::memcpy(data_ + size_, values, n * sizeof(T));
    size_ += n;
  }

 private:
  T* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

template <typename T>
using Buffer = PodBuffer<T>;

// -- Arrow builders --------------------------------------------------------------------------------------

struct Builder {
  char type;  // 'u' string, 'l' int64, 't' timestamp[ms, UTC], 'g' double, 'b' bool, 'c' int8, 'L' list
  std::string name;
  int64_t length = 0, nulls = 0;
  int64_t limit = kStringMax;  // bytes of a string column, elements of a list column
  bool overflow = false;
  Buffer<uint8_t> validity, bits;
  Buffer<int32_t> offsets;
  Buffer<char> chars;
  Buffer<int64_t> ints;
  Buffer<double> doubles;
  Buffer<int8_t> small;
  std::unique_ptr<Builder> child;

  // Every buffer the type exports gets room for one element, so that its pointer is never null (an empty
  // batch too); the others stay unallocated (a body a call, as the JVM's format parses, makes dozens of these).
  Builder(char t, std::string n) : type(t), name(std::move(n)) {
    validity.reserve(1);
    switch (t) {
      case 'u': chars.reserve(1); break;
      case 'l': case 't': ints.reserve(1); break;
      case 'g': doubles.reserve(1); break;
      case 'b': bits.reserve(1); break;
      case 'c': small.reserve(1); break;
    }
    if (t == 'u' || t == 'L') offsets.push_back(0);
  }

  void mark(bool valid) {
    if ((length & 7) == 0) validity.push_back(0);
    if (valid)
      validity.back() |= static_cast<uint8_t>(1u << (length & 7));
    else
      ++nulls;
    ++length;
  }
  void put_bit(bool v, int64_t at) {
    if ((at & 7) == 0) bits.push_back(0);
    if (v) bits.back() |= static_cast<uint8_t>(1u << (at & 7));
  }
  void null() {
    int64_t at = length;
    mark(false);
    switch (type) {
      case 'u': offsets.push_back(offsets.back()); break;
      case 'L': offsets.push_back(offsets.back()); break;
      case 'l': case 't': ints.push_back(0); break;
      case 'g': doubles.push_back(0); break;
      case 'b': put_bit(false, at); break;
      case 'c': small.push_back(0); break;
    }
  }
  void str(std::string_view s) {
    if (static_cast<int64_t>(chars.size()) + static_cast<int64_t>(s.size()) > limit) {
      overflow = true;
      null();
      return;
    }
    mark(true);
    chars.append(s.data(), s.size());
    offsets.push_back(static_cast<int32_t>(chars.size()));
  }
  void int64(int64_t v) {
    mark(true);
    ints.push_back(v);
  }
  void dbl(double v) {
    mark(true);
    doubles.push_back(v);
  }
  void boolean(bool v) {
    int64_t at = length;
    mark(true);
    put_bit(v, at);
  }
  void int8(int8_t v) {
    mark(true);
    small.push_back(v);
  }
  // A value of the builder's type ('u' also takes an integer, as its decimal text: int-or-string fields).
  void value(const Val& v) {
    if (v.tag == Val::NONE) return null();
    switch (type) {
      case 'u':
        if (v.tag == Val::INT) {
          char text[24];
          auto r = std::to_chars(text, text + sizeof text, v.i);
          return str(std::string_view(text, static_cast<size_t>(r.ptr - text)));
        }
        return str(v.s);
      case 'l': case 't': return int64(v.i);
      case 'g': return dbl(v.d);
      case 'b': return boolean(v.b);
    }
    null();
  }
  void list(int64_t count) {
    int64_t end = offsets.back() + count;
    if (end > limit) overflow = true;
    mark(true);
    offsets.push_back(static_cast<int32_t>(end));
  }
  bool overflowed() const { return overflow || (child && child->overflowed()); }
};

char arrow_type_of(Kind kind) {
  switch (kind) {
    case K_STRING: case K_ANY: case K_JSON: return 'u';
    case K_INTEGER: case K_LENGTH: return 'l';
    case K_TIMESTAMP: return 't';
    case K_NUMBER: return 'g';
    case K_BOOLEAN: return 'b';
    default: return 'u';
  }
}

// -- export through the Arrow C data interface -----------------------------------------------------------

struct ArrayHolder {
  std::unique_ptr<Builder> builder;
  std::vector<const void*> buffers;
  std::vector<ArrowArray> children;
  std::vector<ArrowArray*> pointers;
  std::vector<std::unique_ptr<Builder>> owned_children;
};

void release_array(ArrowArray* array) {
  auto* holder = static_cast<ArrayHolder*>(array->private_data);
  for (auto& c : holder->children)
    if (c.release) c.release(&c);
  delete holder;
  array->release = nullptr;
}

void export_array(std::unique_ptr<Builder> b, std::vector<std::unique_ptr<Builder>> fields, int64_t length,
                  ArrowArray* out) {
  auto holder = std::make_unique<ArrayHolder>();
  Builder* raw = b.get();
  std::vector<std::unique_ptr<Builder>> kids = std::move(fields);
  if (raw->type == 'L') kids.push_back(std::move(raw->child));
  holder->children.resize(kids.size());
  for (size_t i = 0; i < kids.size(); ++i) {
    int64_t n = kids[i]->length;
    export_array(std::move(kids[i]), {}, n, &holder->children[i]);
    holder->pointers.push_back(&holder->children[i]);
  }
  const void* validity = raw->nulls ? raw->validity.data() : nullptr;
  switch (raw->type) {
    case 'S': holder->buffers = {nullptr}; break;
    case 'u': holder->buffers = {validity, raw->offsets.data(), raw->chars.data()}; break;
    case 'L': holder->buffers = {validity, raw->offsets.data()}; break;
    case 'l': case 't': holder->buffers = {validity, raw->ints.data()}; break;
    case 'g': holder->buffers = {validity, raw->doubles.data()}; break;
    case 'b': holder->buffers = {validity, raw->bits.data()}; break;
    case 'c': holder->buffers = {validity, raw->small.data()}; break;
  }
  out->length = length;
  out->null_count = raw->type == 'S' ? 0 : raw->nulls;
  out->offset = 0;
  out->n_buffers = static_cast<int64_t>(holder->buffers.size());
  out->n_children = static_cast<int64_t>(holder->children.size());
  out->buffers = holder->buffers.data();
  out->children = holder->pointers.empty() ? nullptr : holder->pointers.data();
  out->dictionary = nullptr;
  out->release = release_array;
  holder->builder = std::move(b);
  out->private_data = holder.release();
}

struct SchemaHolder {
  std::string format, name;
  std::vector<ArrowSchema> children;
  std::vector<ArrowSchema*> pointers;
};

void release_schema(ArrowSchema* schema) {
  auto* holder = static_cast<SchemaHolder*>(schema->private_data);
  for (auto& c : holder->children)
    if (c.release) c.release(&c);
  delete holder;
  schema->release = nullptr;
}

void export_schema(const Builder& b, const std::vector<const Builder*>& fields, ArrowSchema* out) {
  auto holder = std::make_unique<SchemaHolder>();
  holder->name = b.name;
  std::vector<const Builder*> kids = fields;
  switch (b.type) {
    case 'S': holder->format = "+s"; break;
    case 'u': holder->format = "u"; break;
    case 'L': holder->format = "+l"; kids.push_back(b.child.get()); break;
    case 'l': holder->format = "l"; break;
    case 't': holder->format = "tsm:UTC"; break;
    case 'g': holder->format = "g"; break;
    case 'b': holder->format = "b"; break;
    case 'c': holder->format = "c"; break;
  }
  holder->children.resize(kids.size());
  for (size_t i = 0; i < kids.size(); ++i) {
    export_schema(*kids[i], {}, &holder->children[i]);
    holder->pointers.push_back(&holder->children[i]);
  }
  out->format = holder->format.c_str();
  out->name = holder->name.c_str();
  out->metadata = nullptr;
  out->flags = ARROW_FLAG_NULLABLE;
  out->n_children = static_cast<int64_t>(holder->children.size());
  out->children = holder->pointers.empty() ? nullptr : holder->pointers.data();
  out->dictionary = nullptr;
  out->release = release_schema;
  out->private_data = holder.release();
}

// -- ISO-8601 `created` (the forms read here; the reference takes any other) -----------------------------

using dspark_exact::days_from_civil;

bool digits(std::string_view s, size_t at, size_t count, int& out) {
  if (at + count > s.size()) return false;
  out = 0;
  for (size_t i = at; i < at + count; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

// YYYY-MM-DD, or YYYY-MM-DD[T ]HH:MM[:SS[.f{1,6}]][Z|+HH:MM|-HH:MM]; false for anything else.
bool iso_ms(std::string_view s, int64_t& ms) {
  int year, month, day, hour = 0, minute = 0, second = 0, micro = 0, offset = 0;
  if (!digits(s, 0, 4, year) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, month) || s[7] != '-' ||
      !digits(s, 8, 2, day))
    return false;
  static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > dim[month - 1] + (month == 2 && leap)) return false;
  size_t at = 10;
  if (s.size() > 10) {
    if ((s[10] != 'T' && s[10] != ' ') || !digits(s, 11, 2, hour) || s.size() < 16 || s[13] != ':' ||
        !digits(s, 14, 2, minute))
      return false;
    at = 16;
    if (at < s.size() && s[at] == ':') {
      if (!digits(s, at + 1, 2, second)) return false;
      at += 3;
      if (at < s.size() && s[at] == '.') {
        size_t start = ++at;
        while (at < s.size() && at - start < 7 && s[at] >= '0' && s[at] <= '9') micro = micro * 10 + (s[at++] - '0');
        size_t count = at - start;
        if (count < 1 || count > 6) return false;
        for (size_t k = count; k < 6; ++k) micro *= 10;
      }
    }
    if (hour > 23 || minute > 59 || second > 59) return false;
    if (at < s.size()) {
      if (s[at] == 'Z' && at + 1 == s.size()) {
        at += 1;
      } else if ((s[at] == '+' || s[at] == '-') && at + 6 == s.size() && s[at + 3] == ':') {
        int oh, om;
        if (!digits(s, at + 1, 2, oh) || !digits(s, at + 4, 2, om) || oh > 23 || om > 59) return false;
        offset = (oh * 3600 + om * 60) * (s[at] == '-' ? -1 : 1);
        at += 6;
      } else {
        return false;
      }
    }
  }
  if (at != s.size()) return false;
  int64_t seconds = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 +
                    hour * 3600 + minute * 60 + second - offset;
  int64_t us = seconds * 1000000 + micro;
  ms = us >= 0 ? us / 1000 : -((-us + 999) / 1000);
  return true;
}

// -- the walk over one document ---------------------------------------------------------------------------

struct Entry {
  int node;
  int64_t element;  // the element of the '*' array above this node (for slots under '*')
};

using dspark_exact::write_double;  // Python's repr of a float
using dspark_exact::write_string;  // Python's json.dumps(s, ensure_ascii=False)

void write_number(std::string& out, ondemand::number& number) {
  char buf[32];
  switch (number.get_number_type()) {
    case ondemand::number_type::signed_integer: {
      auto r = std::to_chars(buf, buf + sizeof buf, number.get_int64());
      out.append(buf, static_cast<size_t>(r.ptr - buf));
      break;
    }
    case ondemand::number_type::unsigned_integer: {
      auto r = std::to_chars(buf, buf + sizeof buf, number.get_uint64());
      out.append(buf, static_cast<size_t>(r.ptr - buf));
      break;
    }
    default:
      write_double(out, number.get_double());
  }
}

struct Walk {
  const Shape& shape;
  Scratch& scratch;
  Unit unit;
  int verdict = DSPARK_OK;
  std::string* sink = nullptr;  // where the value being visited is written as JSON text, if anywhere

  bool fail(int v) {
    if (verdict == DSPARK_OK) verdict = v;
    return false;
  }

  void put(int slot, int64_t element, const Val& v) {
    scratch.touched.push_back(slot);
    if (shape.slots[slot].star)
      scratch.multi[slot].emplace_back(element, v);
    else
      scratch.single[slot] = v;
  }

  // A value met at the nodes `es` that is an object or an array: every slot there must take one.
  bool container(const Entry* es, int k, bool is_array) {
    for (int e = 0; e < k; ++e) {
      const Node& node = shape.nodes[es[e].node];
      if (is_array ? !node.keys.empty() : (node.first >= 0 || node.every >= 0)) return fail(DSPARK_WRONG_TYPE);
      for (int slot : node.slots) {
        Kind kind = shape.slots[slot].kind;
        if (kind == K_PROBE_ERROR) return fail(DSPARK_ERROR_RESPONSE);
        if (kind == K_PROBE_OBJECT) continue;
        if (kind == K_JSON) continue;
        if (is_array && (kind == K_LENGTH || kind == K_ARRAY)) continue;
        return fail(DSPARK_WRONG_TYPE);
      }
    }
    return true;
  }

  // A scalar met at the nodes `es`: no node may want to walk into it.
  bool scalar(const Entry* es, int k) {
    for (int e = 0; e < k; ++e) {
      const Node& node = shape.nodes[es[e].node];
      if (!node.keys.empty() || node.first >= 0 || node.every >= 0) return fail(DSPARK_WRONG_TYPE);
    }
    return true;
  }

  // A value at the nodes `es`. A JSON-kind slot there takes the value's text as Python's
  // json.dumps(value, ensure_ascii=False, separators=(",", ":")) writes it (tests/oracle/exact.py's
  // json_text), written while the value is visited.
  bool value(ondemand::value v, const Entry* es, int k, int depth) {
    int json_slot = -1;
    int64_t element = 0;
    if (!sink) {
      for (int e = 0; e < k && json_slot < 0; ++e)
        for (int slot : shape.nodes[es[e].node].slots)
          if (shape.slots[slot].kind == K_JSON) {
            json_slot = slot;
            element = es[e].element;
          }
    }
    if (json_slot < 0) return visit(v, es, k, depth);
    std::string& text = scratch.text[static_cast<size_t>(json_slot)];
    text.clear();
    sink = &text;
    bool ok = visit(v, es, k, depth);
    sink = nullptr;
    if (!ok) return false;
    if (text != "null") {  // a null is no value: the column is null, not the text "null"
      Val val;
      val.tag = Val::STR;
      val.s = text;
      put(json_slot, element, val);
    }
    return true;
  }

  bool visit(ondemand::value v, const Entry* es, int k, int depth) {
    ondemand::json_type type;
    if (v.type().get(type)) return fail(DSPARK_NOT_JSON);
    switch (type) {
      case ondemand::json_type::object: {
        if (depth + 1 > kDepthLimit) return fail(DSPARK_TOO_DEEP);
        if (k && !container(es, k, false)) return false;
        ondemand::object o;
        if (v.get_object().get(o)) return fail(DSPARK_NOT_JSON);
        if (sink) sink->push_back('{');
        if (!object(o, es, k, depth + 1)) return false;
        if (sink) sink->push_back('}');
        return true;
      }
      case ondemand::json_type::array: {
        if (depth + 1 > kDepthLimit) return fail(DSPARK_TOO_DEEP);
        if (k && !container(es, k, true)) return false;
        ondemand::array a;
        if (v.get_array().get(a)) return fail(DSPARK_NOT_JSON);
        if (sink) sink->push_back('[');
        if (!array(a, es, k, depth + 1)) return false;
        if (sink) sink->push_back(']');
        return true;
      }
      case ondemand::json_type::string: {
        std::string_view s;
        if (v.get_string().get(s)) return fail(DSPARK_NOT_JSON);
        if (sink) write_string(*sink, s);
        if (!k) return true;
        if (!scalar(es, k)) return false;
        Val val;
        val.tag = Val::STR;
        val.s = s;
        return leaves(es, k, val, 's');
      }
      case ondemand::json_type::number: {
        ondemand::number number;
        auto error = v.get_number().get(number);
        if (error) return fail(error == BIGINT_ERROR ? DSPARK_OUT_OF_RANGE : DSPARK_NOT_JSON);
        if (sink) write_number(*sink, number);
        if (!k) return true;
        if (!scalar(es, k)) return false;
        Val val;
        switch (number.get_number_type()) {
          case ondemand::number_type::signed_integer:
            val.tag = Val::INT;
            val.i = number.get_int64();
            return leaves(es, k, val, 'i');
          case ondemand::number_type::unsigned_integer:
            val.tag = Val::DBL;
            val.d = static_cast<double>(number.get_uint64());
            return leaves(es, k, val, 'u');
          case ondemand::number_type::floating_point_number:
            val.tag = Val::DBL;
            val.d = number.get_double();
            return leaves(es, k, val, 'f');
          default:
            return fail(DSPARK_OUT_OF_RANGE);
        }
      }
      case ondemand::json_type::boolean: {
        bool b;
        if (v.get_bool().get(b)) return fail(DSPARK_NOT_JSON);
        if (sink) sink->append(b ? "true" : "false");
        if (!k) return true;
        if (!scalar(es, k)) return false;
        Val val;
        val.tag = Val::BOOL;
        val.b = b;
        return leaves(es, k, val, 'b');
      }
      case ondemand::json_type::null: {
        bool is_null = false;
        if (v.is_null().get(is_null) || !is_null) return fail(DSPARK_NOT_JSON);
        if (sink) sink->append("null");
        return true;
      }
    }
    return fail(DSPARK_NOT_JSON);
  }

  // `what`: 's' string, 'i' int64, 'u' integer beyond int64 (as a double), 'f' a number with a fraction or
  // an exponent, 'b' boolean.
  bool leaves(const Entry* es, int k, const Val& val, char what) {
    for (int e = 0; e < k; ++e) {
      for (int slot : shape.nodes[es[e].node].slots) {
        Kind kind = shape.slots[slot].kind;
        Val out = val;
        switch (kind) {
          case K_STRING:
            if (what != 's') return fail(DSPARK_WRONG_TYPE);
            break;
          case K_INTEGER:
            if (what == 'u') return fail(DSPARK_OUT_OF_RANGE);
            if (what == 'f') return fail(DSPARK_UNSUPPORTED);  // 5.0 is 5 for the reference, 5.5 an error
            if (what != 'i') return fail(DSPARK_WRONG_TYPE);
            break;
          case K_NUMBER:
            if (what == 'i') {
              out.tag = Val::DBL;
              out.d = static_cast<double>(val.i);
            } else if (what != 'u' && what != 'f') {
              return fail(DSPARK_WRONG_TYPE);
            }
            break;
          case K_BOOLEAN:
            if (what != 'b') return fail(DSPARK_WRONG_TYPE);
            break;
          case K_ANY:
            if (what == 'u') return fail(DSPARK_OUT_OF_RANGE);
            if (what != 's' && what != 'i') return fail(DSPARK_WRONG_TYPE);
            break;
          case K_TIMESTAMP:
            if (unit == U_ISO) {
              if (what != 's') return fail(DSPARK_WRONG_TYPE);
              if (!iso_ms(val.s, out.i)) return fail(DSPARK_UNSUPPORTED);
              out.tag = Val::INT;
            } else {
              if (what == 'u') return fail(DSPARK_OUT_OF_RANGE);
              if (what == 'f') return fail(DSPARK_UNSUPPORTED);
              if (what != 'i') return fail(DSPARK_WRONG_TYPE);
              if (unit == U_SECONDS) {
                if (val.i < kMsMin / 1000 || val.i > kMsMax / 1000) return fail(DSPARK_OUT_OF_RANGE);
                out.i = val.i * 1000;
              }
            }
            if (out.i < kMsMin || out.i > kMsMax) return fail(DSPARK_OUT_OF_RANGE);
            break;
          case K_PROBE_ERROR:
            return fail(DSPARK_ERROR_RESPONSE);
          case K_PROBE_OBJECT:
            if (what == 's' && val.s == "error") return fail(DSPARK_ERROR_RESPONSE);
            continue;
          case K_JSON:
            continue;  // written by `value`, as JSON text
          default:
            return fail(DSPARK_WRONG_TYPE);
        }
        put(slot, es[e].element, out);
      }
    }
    return true;
  }

  bool object(ondemand::object o, const Entry* es, int k, int depth) {
    uint64_t seen[kMaxEntries];
    std::fill_n(seen, k, uint64_t{0});
    std::vector<std::string_view> names;  // of an object written as JSON text: a repeated one is left
    bool first = true;
    for (auto field : o) {
      ondemand::field f;
      if (std::move(field).get(f)) return fail(DSPARK_NOT_JSON);
      // A name without a backslash is valid as it is (stage 1 checked UTF-8 and control characters);
      // only one with an escape is unescaped, which also checks its escapes.
      std::string_view key = f.escaped_key();
      if (key.find('\\') != std::string_view::npos && f.unescaped_key().get(key)) return fail(DSPARK_NOT_JSON);
      if (sink) {
        // Python keeps a repeated name at its first place with its last value: left to the reference.
        for (auto name : names)
          if (name == key) return fail(DSPARK_REPEATED_NAME);
        names.push_back(key);
        if (!first) sink->push_back(',');
        write_string(*sink, key);
        sink->push_back(':');
      }
      first = false;
      Entry child[kMaxEntries];
      int ck = 0;
      for (int e = 0; e < k; ++e) {
        const auto& keys = shape.nodes[es[e].node].keys;
        for (size_t j = 0; j < keys.size(); ++j) {
          if (keys[j].first != key) continue;
          uint64_t bit = j < 64 ? uint64_t{1} << j : 0;
          if (!bit || (seen[e] & bit)) return fail(DSPARK_REPEATED_NAME);
          seen[e] |= bit;
          if (ck == kMaxEntries) return fail(DSPARK_UNSUPPORTED);
          child[ck++] = {keys[j].second, es[e].element};
          break;  // a node's names are all different
        }
      }
      if (!value(f.value(), child, ck, depth)) return false;
    }
    return true;
  }

  bool array(ondemand::array a, const Entry* es, int k, int depth) {
    int64_t count = 0;
    for (auto element : a) {
      ondemand::value v;
      if (std::move(element).get(v)) return fail(DSPARK_NOT_JSON);
      if (sink && count) sink->push_back(',');
      Entry child[kMaxEntries];
      int ck = 0;
      for (int e = 0; e < k; ++e) {
        const Node& node = shape.nodes[es[e].node];
        if (node.first >= 0 && count == 0) {
          if (ck == kMaxEntries) return fail(DSPARK_UNSUPPORTED);
          child[ck++] = {node.first, es[e].element};
        }
        if (node.every >= 0) {
          if (ck == kMaxEntries) return fail(DSPARK_UNSUPPORTED);
          child[ck++] = {node.every, count};
        }
      }
      if (!value(v, child, ck, depth)) return false;
      ++count;
    }
    for (int e = 0; e < k; ++e) {
      scratch.length[es[e].node] = count;
      for (int slot : shape.nodes[es[e].node].slots) {
        if (shape.slots[slot].kind == K_LENGTH) {
          Val val;
          val.tag = Val::INT;
          val.i = count;
          put(slot, es[e].element, val);
        }
      }
    }
    return true;
  }

  // The whole document: one object, nothing after it.
  int document(ondemand::parser& parser, padded_string_view text) {
    ondemand::document doc;
    if (parser.iterate(text).get(doc)) return DSPARK_NOT_JSON;
    ondemand::json_type type;
    if (doc.type().get(type)) return DSPARK_NOT_JSON;
    if (type != ondemand::json_type::object) {
      // Still one valid value? The reference says "not a JSON object" or why not; either way it decides.
      return DSPARK_NOT_OBJECT;
    }
    ondemand::object o;
    if (doc.get_object().get(o)) return DSPARK_NOT_JSON;
    Entry root{0, 0};
    if (!object(o, &root, 1, 1)) return verdict;
    if (!doc.at_end()) return DSPARK_NOT_JSON;
    return DSPARK_OK;
  }
};

// -- columns ----------------------------------------------------------------------------------------------

struct Column {
  std::string name;
  Kind kind;
  bool list = false;
  int star_parent = -1;
  std::vector<int> slots;  // one per alternative path, in order: the first non-null wins
};

struct Plan {
  Unit unit = U_SECONDS;
  int64_t max_body = int64_t{256} << 20;
  int64_t max_column = kStringMax;  // a smaller one only to test the caller's splitting of a batch
  Shape body, content;
  std::vector<Column> columns, properties;
  int content_column = -1;
  // "explain": every body the fast pass leaves is decided by the slow path (dspark_exact.cpp), which needs
  // the columns and properties as exact.py sees them.
  bool explain = false;
  bool text_errors = true;  // content.text_errors: a free-text content's content_error is wanted
  std::vector<dspark_exact::ColumnSpec> exact_columns;
  std::vector<dspark_exact::PropertySpec> exact_properties;
  // With "explain", the content properties' x-extract patterns read free text (dspark_extract.cpp); null
  // when no property has one.
  std::unique_ptr<dspark::TextExtractor> extractor;
};

dspark::ContentKind content_kind(Kind kind) {
  switch (kind) {
    case K_INTEGER: return dspark::ContentKind::INTEGER;
    case K_NUMBER: return dspark::ContentKind::NUMBER;
    case K_BOOLEAN: return dspark::ContentKind::BOOLEAN;
    case K_ARRAY: return dspark::ContentKind::ARRAY;
    case K_JSON: return dspark::ContentKind::JSON;
    default: return dspark::ContentKind::STRING;
  }
}

bool extract_mode(std::string_view s, dspark::ExtractMode& mode) {
  if (s == "first") mode = dspark::ExtractMode::FIRST;
  else if (s == "last") mode = dspark::ExtractMode::LAST;
  else if (s == "all") mode = dspark::ExtractMode::ALL;
  else if (s == "count") mode = dspark::ExtractMode::COUNT;
  else return false;
  return true;
}

bool kind_of(std::string_view s, Kind& kind) {
#define DSPARK_KIND_NAME(name, KIND) {name, K_##KIND},
  static const std::pair<const char*, Kind> names[] = {DSPARK_KINDS(DSPARK_KIND_NAME)};
#undef DSPARK_KIND_NAME
  for (auto& [name, k] : names)
    if (s == name) {
      kind = k;
      return true;
    }
  return false;
}

std::string read_plan(const char* text, size_t len, Plan& plan) {
  dom::parser parser;
  dom::element root;
  if (parser.parse(text, len).get(root)) return "the plan is not JSON";
  int64_t version;
  if (root["version"].get_int64().get(version) || version != DSPARK_PLAN_VERSION)
    return "the plan's version is not " + std::to_string(DSPARK_PLAN_VERSION);
  bool explain;
  if (!root["explain"].get_bool().get(explain)) plan.explain = explain;
  std::string_view unit;
  if (root["created_unit"].get_string().get(unit)) return "the plan has no created_unit";
  if (unit == "seconds") plan.unit = U_SECONDS;
  else if (unit == "millis") plan.unit = U_MILLIS;
  else if (unit == "iso") plan.unit = U_ISO;
  else return "unknown created_unit";
  int64_t max_body;
  if (!root["max_body_bytes"].get_int64().get(max_body)) plan.max_body = max_body;
  int64_t max_column;
  if (!root["max_column_bytes"].get_int64().get(max_column) && max_column > 0 && max_column < kStringMax)
    plan.max_column = max_column;
  dom::array columns;
  if (root["columns"].get_array().get(columns)) return "the plan has no columns";
  for (dom::element c : columns) {
    Column column;
    std::string_view name, kind;
    dom::array paths;
    if (c["name"].get_string().get(name) || c["kind"].get_string().get(kind) || c["paths"].get_array().get(paths) ||
        !kind_of(kind, column.kind) || column.kind == K_JSON || column.kind == K_ARRAY)
      return "a column needs a name, a kind and paths";
    column.name = std::string(name);
    dspark_exact::ColumnSpec spec{static_cast<dspark_exact::Kind>(column.kind), {}, -1};
    for (dom::element p : paths) {
      std::vector<std::string> path;
      dom::array segments;
      if (p.get_array().get(segments)) return "a path is an array of names";
      for (dom::element s : segments) {
        std::string_view segment;
        if (s.get_string().get(segment)) return "a path is an array of names";
        path.emplace_back(segment);
        if (segment == "*" && column.kind != K_LENGTH) {
          column.list = true;
          if (spec.star < 0 || spec.paths.empty()) spec.star = static_cast<int>(path.size()) - 1;
        }
      }
      spec.paths.push_back(path);
      column.slots.push_back(plan.body.add(path, column.kind, &column.star_parent));
    }
    if (column.slots.empty()) return "a column needs a path";
    plan.columns.push_back(std::move(column));
    plan.exact_columns.push_back(std::move(spec));
  }
  // Read to recognise error responses, which the reference turns into error rows.
  plan.body.add({"error"}, K_PROBE_ERROR, nullptr);
  plan.body.add({"object"}, K_PROBE_OBJECT, nullptr);
  dom::object content;
  if (!root["content"].get_object().get(content)) {
    if (content["column"].get_int64().get(version) || version < 0 ||
        version >= static_cast<int64_t>(plan.columns.size()) || plan.columns[version].list ||
        plan.columns[version].kind != K_STRING)
      return "content.column is the index of a string column";
    plan.content_column = static_cast<int>(version);
    bool text_errors;
    if (!content["text_errors"].get_bool().get(text_errors)) plan.text_errors = text_errors;
    dom::array properties;
    if (content["properties"].get_array().get(properties)) return "content has no properties";
    std::vector<dspark::ContentPropertySpec> extract_specs;
    bool extracts = false;
    for (dom::element p : properties) {
      Column prop;
      std::string_view name, kind;
      if (p["name"].get_string().get(name) || p["kind"].get_string().get(kind) || !kind_of(kind, prop.kind) ||
          prop.kind == K_ANY || prop.kind == K_LENGTH || prop.kind == K_TIMESTAMP)
        return "a content property needs a name and a kind";
      prop.name = std::string(name);
      dspark_exact::PropertySpec spec{prop.name, static_cast<dspark_exact::Kind>(prop.kind), dspark_exact::STRING};
      dspark::ContentPropertySpec extract_spec;
      extract_spec.name = prop.name;
      extract_spec.kind = content_kind(prop.kind);
      dom::object extract;
      if (!p["extract"].get_object().get(extract)) {
        std::string_view pattern, mode;
        if (extract["pattern"].get_string().get(pattern) || extract["mode"].get_string().get(mode) ||
            !extract_mode(mode, extract_spec.mode))
          return "a property's extract needs a pattern and a mode (first, last, all, count)";
        extract_spec.has_extract = extracts = true;
        extract_spec.pattern = std::string(pattern);
      }
      if (prop.kind == K_ARRAY) {
        std::string_view item;
        Kind item_kind;
        if (p["item_kind"].get_string().get(item) || !kind_of(item, item_kind) || item_kind > K_BOOLEAN)
          return "an array property needs an item_kind";
        spec.item_kind = static_cast<dspark_exact::Kind>(item_kind);
        extract_spec.item_kind = content_kind(item_kind);
        plan.content.add({prop.name}, K_ARRAY, nullptr);
        prop.slots.push_back(plan.content.add({prop.name, "*"}, item_kind, &prop.star_parent));
        prop.kind = item_kind;
        prop.list = true;
      } else {
        prop.slots.push_back(plan.content.add({prop.name}, prop.kind, nullptr));
      }
      plan.properties.push_back(std::move(prop));
      plan.exact_properties.push_back(std::move(spec));
      extract_specs.push_back(std::move(extract_spec));
    }
    if (extracts) {
      plan.extractor = std::make_unique<dspark::TextExtractor>(std::move(extract_specs));
      if (!plan.extractor->ok()) return "content: " + plan.extractor->error();
    }
  }
  return "";
}

void reserve(Builder& b, int64_t n) {
  size_t rows = static_cast<size_t>(n) + 1;
  b.validity.reserve(rows / 8 + 1);
  switch (b.type) {
    case 'u': case 'L': b.offsets.reserve(rows); break;
    case 'l': case 't': b.ints.reserve(rows); break;
    case 'g': b.doubles.reserve(rows); break;
    case 'b': b.bits.reserve(rows / 8 + 1); break;
    case 'c': b.small.reserve(rows); break;
  }
}

std::unique_ptr<Builder> builder_for(const Column& column, int64_t n, int64_t limit) {
  auto b = std::make_unique<Builder>(column.list ? 'L' : arrow_type_of(column.kind), column.name);
  reserve(*b, n);
  b->limit = limit;
  if (column.list) {
    b->child = std::make_unique<Builder>(arrow_type_of(column.kind), "item");
    reserve(*b->child, n);
    b->child->limit = limit;
  }
  return b;
}

// The value of a column in the scratch of one document (`element`: none when not a list).
Val coalesced(const Column& column, const Scratch& scratch) {
  for (int slot : column.slots)
    if (scratch.single[slot].tag != Val::NONE) return scratch.single[slot];
  return Val{};
}

void append(const Column& column, const Scratch& scratch, Builder& b, std::vector<Val>& elements) {
  if (!column.list) return b.value(coalesced(column, scratch));
  int64_t count = scratch.length[static_cast<size_t>(column.star_parent)];
  if (count < 0) return b.null();
  elements.assign(static_cast<size_t>(count), Val{});
  for (int slot : column.slots)
    for (const auto& [element, v] : scratch.multi[slot])
      if (element < count && elements[element].tag == Val::NONE) elements[element] = v;
  for (const auto& v : elements) b.child->value(v);
  b.list(count);
}

Val val_of(const dspark_exact::Scalar& s) {
  Val v;
  switch (s.tag) {
    case dspark_exact::Scalar::NONE: break;
    case dspark_exact::Scalar::STR: v.tag = Val::STR; v.s = s.s; break;
    case dspark_exact::Scalar::INT: v.tag = Val::INT; v.i = s.i; break;
    case dspark_exact::Scalar::DBL: v.tag = Val::DBL; v.d = s.d; break;
    case dspark_exact::Scalar::BOOL: v.tag = Val::BOOL; v.b = s.b; break;
  }
  return v;
}

// A column's value as the slow path decided it.
void put_cell(const Column& column, const dspark_exact::Cell& cell, Builder& b) {
  if (!column.list) return b.value(val_of(cell.value));
  if (!cell.present) return b.null();
  for (const auto& item : cell.items) b.child->value(val_of(item));
  b.list(static_cast<int64_t>(cell.items.size()));
}

// A property's value as its x-extract pattern took it from free text.
void put_extracted(const Column& column, const dspark::ExtractedValue& v, Builder& b) {
  auto scalar = [](const dspark::ExtractedValue& e) {
    Val out;
    switch (e.tag) {
      case dspark::ExtractedValue::STR: out.tag = Val::STR; out.s = e.str; break;
      case dspark::ExtractedValue::INT: out.tag = Val::INT; out.i = e.i; break;
      case dspark::ExtractedValue::DBL: out.tag = Val::DBL; out.d = e.d; break;
      case dspark::ExtractedValue::BOOL: out.tag = Val::BOOL; out.b = e.b; break;
      default: break;
    }
    return out;
  };
  if (!column.list) return b.value(scalar(v));
  if (v.tag != dspark::ExtractedValue::LIST) return b.null();
  for (const auto& item : v.items) b.child->value(scalar(item));
  b.list(static_cast<int64_t>(v.items.size()));
}

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The text inside one ```lang fence around the whole content (tests/oracle/content.py's _FENCE), or
// the content itself.
std::string_view unfenced(std::string_view s) {
  size_t n = s.size(), p = 0;
  while (p < n && space(s[p])) ++p;
  if (s.compare(p, 3, "```") != 0) return s;
  size_t q = p + 3;
  while (q < n && ((s[q] >= 'A' && s[q] <= 'Z') || (s[q] >= 'a' && s[q] <= 'z'))) ++q;
  while (q < n && (s[q] == ' ' || s[q] == '\t')) ++q;
  size_t start;
  if (q + 1 < n && s[q] == '\r' && s[q + 1] == '\n')
    start = q + 2;
  else if (q < n && s[q] == '\n')
    start = q + 1;
  else
    return s;
  size_t e = n;
  while (e > 0 && space(s[e - 1])) --e;
  if (e < start + 3 || s.compare(e - 3, 3, "```") != 0) return s;
  size_t close = e - 3, end = close;
  if (close >= start + 2 && s[close - 2] == '\r' && s[close - 1] == '\n')
    end = close - 2;
  else if (close >= start + 1 && (s[close - 1] == '\r' || s[close - 1] == '\n'))
    end = close - 1;
  return s.substr(start, end - start);
}

// A thread's parsers are kept from call to call (the JVM's format makes a call a body: allocating them anew
// each time would cost more than the body); their buffers grow to the largest body met. After a call that met
// a large body they are let go, and the slow path's freed memory given back: otherwise a thread that once read
// a 100 MiB body held 500 MB (simdjson's index, 4 bytes a byte, and its string buffer) for its lifetime.
// The fuzz targets build with a smaller DSPARK_KEPT_BYTES, so that bodies a fuzzer makes reach the release.
#ifndef DSPARK_KEPT_BYTES
#define DSPARK_KEPT_BYTES (size_t{16} << 20)
#endif
struct Parsers {
  static constexpr size_t kKept = DSPARK_KEPT_BYTES;  // a body up to this leaves the buffers as they are
  ondemand::parser body, content;
  std::string padded;          // a copy of a body without SIMDJSON_PADDING readable bytes after it
  std::string content_padded;  // a copy of a content (it lives in the body parser's string buffer)
  bool large = false;          // a body over kKept was met in this call

  void trim() {
    if (!large) return;
    large = false;
    if (body.capacity() > kKept) body = ondemand::parser{};
    if (content.capacity() > kKept) content = ondemand::parser{};
    if (padded.capacity() > kKept) std::string().swap(padded);
    if (content_padded.capacity() > kKept) std::string().swap(content_padded);
#ifdef __GLIBC__
    malloc_trim(0);  // the slow path's tree of a large body is many small blocks, which glibc keeps
#endif
  }
};

// Calls Parsers::trim when a call ends, whichever way it ends.
struct TrimAtEnd {
  Parsers& parsers;
  ~TrimAtEnd() { parsers.trim(); }
};

padded_string_view padded_view(const char* text, size_t len, size_t readable, std::string& copy) {
  if (readable >= len + SIMDJSON_PADDING) return padded_string_view(text, len, readable);
  copy.assign(text, len);
  copy.append(SIMDJSON_PADDING, ' ');
  return padded_string_view(copy.data(), len, copy.size());
}

// The plan of the last call on this thread, read once: callers give the same plan call after call (the JVM's
// format gives one body a call, where reading the plan would cost more than the body).
const Plan* plan_of(const char* text, size_t len, std::string& message) {
  static thread_local std::string last_text;
  static thread_local std::unique_ptr<Plan> last;
  if (last && last_text.size() == len && std::memcmp(last_text.data(), text, len) == 0) return last.get();
  auto plan = std::make_unique<Plan>();
  message = read_plan(text, len, *plan);
  if (!message.empty()) return nullptr;
  last_text.assign(text, len);
  last = std::move(plan);
  return last.get();
}

int32_t parse(const char* plan_text, size_t plan_len, const uint8_t* data, size_t data_len, const int64_t* offsets,
              int64_t n, ArrowArray* out, ArrowSchema* out_schema, std::string& message) {
  const Plan* read = plan_of(plan_text, plan_len, message);
  if (read == nullptr) return DSPARK_BAD_PLAN;
  const Plan& plan = *read;
  if (n < 0 || (n > 0 && (!offsets || !data))) {
    message = "no bodies given";
    return DSPARK_BAD_INPUT;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (offsets[i] < 0 || offsets[i + 1] < offsets[i] || static_cast<uint64_t>(offsets[i + 1]) > data_len) {
      message = "offsets must increase and stay within the data";
      return DSPARK_BAD_INPUT;
    }
  }
  static thread_local Parsers parsers;
  TrimAtEnd trim_at_end{parsers};
  std::vector<std::unique_ptr<Builder>> builders, content_builders;
  for (const auto& c : plan.columns) builders.push_back(builder_for(c, n, plan.max_column));
  for (const auto& p : plan.properties) content_builders.push_back(builder_for(p, n, plan.max_column));
  auto verdicts = std::make_unique<Builder>('c', "verdict");
  auto content_verdicts = std::make_unique<Builder>('c', "content_verdict");
  reserve(*verdicts, n);
  reserve(*content_verdicts, n);
  // With "explain": why a body is not a row (reason, field), and a content's error.
  std::vector<std::unique_ptr<Builder>> explained;
  for (const char* name : {"reason", "field", "content_error"}) {
    explained.push_back(std::make_unique<Builder>('u', name));
    explained.back()->limit = plan.max_column;
  }
  Builder &reasons = *explained[0], &fields_of = *explained[1], &content_errors = *explained[2];
  Scratch body, content;
  std::vector<Val> elements;
  std::vector<dspark_exact::Cell> cells, content_cells;
  std::vector<dspark::ExtractedValue> extracted;
  dspark_exact::Rejection why;
  std::string content_error;
  const bool has_content = plan.content_column >= 0;
  const auto exact_unit = static_cast<dspark_exact::Unit>(plan.unit);
  for (int64_t i = 0; i < n; ++i) {
    const char* text = reinterpret_cast<const char*>(data) + offsets[i];
    size_t len = static_cast<size_t>(offsets[i + 1] - offsets[i]);
    int verdict;
    body.reset(plan.body);
    Walk walk{plan.body, body, plan.unit};
    if (len > Parsers::kKept) parsers.large = true;
    if (static_cast<int64_t>(len) > plan.max_body) {
      verdict = DSPARK_TOO_LARGE;
    } else if (len >= 3 && static_cast<uint8_t>(text[0]) == 0xEF && static_cast<uint8_t>(text[1]) == 0xBB &&
               static_cast<uint8_t>(text[2]) == 0xBF) {
      verdict = DSPARK_BYTE_ORDER_MARK;
    } else {
      size_t readable = data_len - static_cast<size_t>(offsets[i]);
      verdict = walk.document(parsers.body, padded_view(text, len, readable, parsers.padded));
    }
    // The slow path decides what the fast pass left (a body refused by its size stays unread: its reason
    // says so).
    bool slow_row = false;
    if (verdict != DSPARK_OK && plan.explain && verdict != DSPARK_TOO_LARGE) {
      if (dspark_exact::decode_body(std::string_view(text, len), plan.exact_columns, exact_unit, cells, why)) {
        verdict = DSPARK_OK;
        slow_row = true;
      } else {
        verdict = why.category;
      }
    }
    if (verdict != DSPARK_OK) {
      for (auto& b : builders) b->null();
      for (auto& b : content_builders) b->null();
      verdicts->int8(static_cast<int8_t>(verdict));
      content_verdicts->int8(plan.explain ? DSPARK_CONTENT_NULL : DSPARK_CONTENT_DEFERRED);
      if (plan.explain) {
        if (verdict == DSPARK_TOO_LARGE) {  // exact.py's reason (decode_body), from the length alone
          reasons.str("body too large: over " + std::to_string(plan.max_body) + " bytes");
          fields_of.null();
        } else {
          reasons.str(why.reason);
          why.has_field ? fields_of.str(why.field) : fields_of.null();
        }
        content_errors.null();
      }
      continue;
    }
    for (size_t c = 0; c < plan.columns.size(); ++c) {
      if (slow_row)
        put_cell(plan.columns[c], cells[c], *builders[c]);
      else
        append(plan.columns[c], body, *builders[c], elements);
    }
    verdicts->int8(DSPARK_OK);
    if (plan.explain) {
      reasons.null();
      fields_of.null();
    }
    if (!has_content) continue;
    bool present;
    std::string_view content_text;
    if (slow_row) {
      const auto& cell = cells[static_cast<size_t>(plan.content_column)];
      present = cell.value.tag != dspark_exact::Scalar::NONE;
      content_text = cell.value.s;
    } else {
      Val text_value = coalesced(plan.columns[plan.content_column], body);
      present = text_value.tag != Val::NONE;
      content_text = text_value.s;
    }
    int content_verdict;
    bool slow_content = false, has_error = false, text_read = false;
    content.reset(plan.content);
    if (!present) {
      content_verdict = DSPARK_CONTENT_NULL;
    } else {
      std::string_view inner = unfenced(content_text);
      size_t p = 0;
      while (p < inner.size() && space(inner[p])) ++p;
      if (p == inner.size() || (inner[p] != '{' && inner[p] != '[')) {
        content_verdict = DSPARK_CONTENT_TEXT;
        if (plan.explain && plan.extractor) {
          // The x-extract patterns read the whole content (tests/oracle/extract.py).
          has_error = plan.extractor->extract(content_text, extracted, content_error);
          text_read = true;
        } else if (plan.explain && plan.text_errors) {
          // What the reference says of it when no x-extract pattern reads it (always an error, no values).
          has_error = dspark_exact::json_content_values(inner, plan.exact_properties, content_cells, content_error);
        }
      } else {
        Walk read{plan.content, content, U_SECONDS};
        // The content is in the body parser's string buffer: copied, with padding, for the second parser.
        std::string& copy = parsers.content_padded;
        copy.assign(inner.data(), inner.size());
        copy.append(SIMDJSON_PADDING, ' ');
        content_verdict = read.document(parsers.content, padded_string_view(copy.data(), inner.size(), copy.size())) ==
                                  DSPARK_OK
                              ? DSPARK_CONTENT_JSON
                              : DSPARK_CONTENT_DEFERRED;
        if (content_verdict == DSPARK_CONTENT_DEFERRED && plan.explain) {
          has_error = dspark_exact::json_content_values(inner, plan.exact_properties, content_cells, content_error);
          slow_content = true;
          content_verdict = DSPARK_CONTENT_JSON;
        }
      }
    }
    if (text_read) {
      for (size_t p = 0; p < plan.properties.size(); ++p)
        put_extracted(plan.properties[p], extracted[p], *content_builders[p]);
    } else if (slow_content) {
      for (size_t p = 0; p < plan.properties.size(); ++p)
        put_cell(plan.properties[p], content_cells[p], *content_builders[p]);
    } else if (content_verdict == DSPARK_CONTENT_JSON) {
      for (size_t p = 0; p < plan.properties.size(); ++p)
        append(plan.properties[p], content, *content_builders[p], elements);
    } else {
      for (auto& b : content_builders) b->null();
    }
    content_verdicts->int8(static_cast<int8_t>(content_verdict));
    if (plan.explain) has_error ? content_errors.str(content_error) : content_errors.null();
  }
  for (const auto& b : builders)
    if (b->overflowed()) {
      message = "a column holds more than 2^31 - 1 bytes: give fewer bodies at a time";
      return DSPARK_OUTPUT_TOO_LARGE;
    }
  for (const auto& b : content_builders)
    if (b->overflowed()) {
      message = "a content column holds more than 2^31 - 1 bytes: give fewer bodies at a time";
      return DSPARK_OUTPUT_TOO_LARGE;
    }
  for (const auto& b : explained)
    if (plan.explain && b->overflowed()) {
      message = "the " + b->name + " column holds more than 2^31 - 1 bytes: give fewer bodies at a time";
      return DSPARK_OUTPUT_TOO_LARGE;
    }
  std::vector<std::unique_ptr<Builder>> fields = std::move(builders);
  for (auto& b : content_builders) fields.push_back(std::move(b));
  fields.push_back(std::move(verdicts));
  if (plan.explain) {
    fields.push_back(std::move(explained[0]));
    fields.push_back(std::move(explained[1]));
  }
  if (has_content) fields.push_back(std::move(content_verdicts));
  if (has_content && plan.explain) fields.push_back(std::move(explained[2]));
  auto top = std::make_unique<Builder>('S', "");
  std::vector<const Builder*> views;
  for (const auto& f : fields) views.push_back(f.get());
  export_schema(*top, views, out_schema);
  export_array(std::move(top), std::move(fields), n, out);
  return DSPARK_DONE;
}

}  // namespace

extern "C" int32_t dspark_abi_version(void) { return DSPARK_ABI_VERSION; }

extern "C" int32_t dspark_parse(const char* plan, size_t plan_len, const uint8_t* data, size_t data_len,
                                const int64_t* offsets, int64_t n, ArrowArray* out, ArrowSchema* out_schema,
                                char* error, size_t error_len) {
  std::string message;
  int32_t code;
  try {
    code = parse(plan, plan_len, data, data_len, offsets, n, out, out_schema, message);
  } catch (const std::exception& exc) {
    code = DSPARK_INTERNAL;
    message = exc.what();
  } catch (...) {
    code = DSPARK_INTERNAL;
    message = "unknown exception";
  }
  if (code != DSPARK_DONE && error && error_len) {
    size_t k = message.size() < error_len - 1 ? message.size() : error_len - 1;
    std::memcpy(error, message.data(), k);
    error[k] = '\0';
  }
  return code;
}
