// strict.py's loads and json_text in C++: see dspark_json.h.

#include "dspark_json.h"

#include <locale.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "dspark_core.h"
#include "dspark_unprintable.h"

namespace dspark_exact {

// Python's json.dumps(s, ensure_ascii=False) of a string: '"', '\\' and control characters escaped.
void write_string(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        if (u < 0x20) {
          out.append("\\u00");
          out.push_back(hex[u >> 4]);
          out.push_back(hex[u & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

// Python's repr of a float: the shortest digits that read back as the same double, in fixed notation when
// the decimal point falls within -4 < decpt <= 16 (with ".0" when integral), else d.ddde+XX.
void write_double(std::string& out, double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view t(buf, static_cast<size_t>(r.ptr - buf));
  if (!t.empty() && t[0] == '-') {
    out.push_back('-');
    t.remove_prefix(1);
  }
  size_t e = t.find('e');
  std::string digits(1, t[0]);
  if (e > 1) digits.append(t.substr(2, e - 2));
  int exponent = 0;
  std::from_chars(t.data() + e + (t[e + 1] == '+' ? 2 : 1), t.data() + t.size(), exponent);
  int decpt = exponent + 1;
  int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (n > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    out.push_back('e');
    out.push_back(exponent < 0 ? '-' : '+');
    int a = exponent < 0 ? -exponent : exponent;
    if (a < 10) out.push_back('0');
    out.append(std::to_string(a));
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(static_cast<size_t>(-decpt), '0');
    out.append(digits);
  } else if (decpt < n) {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  } else {
    out.append(digits);
    out.append(static_cast<size_t>(decpt - n), '0');
    out.append(".0");
  }
}

// strtod in the C locale (Python's float() does not follow the process's locale; neither may this).
double c_strtod(const std::string& text) {
  static locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(0));
  return strtod_l(text.c_str(), nullptr, c_locale);
}

// -- Doc: one arena a document -----------------------------------------------------------------------------------

void* Doc::take(size_t bytes) {
  constexpr size_t kAlign = alignof(JValue);
  size_t pad = (kAlign - reinterpret_cast<uintptr_t>(at_) % kAlign) % kAlign;
  if (pad + bytes > left_) {
    if (bytes > next_) {  // a large one has a block of its own; the current block stays in use
      blocks_.emplace_back(new char[bytes]);
      return blocks_.back().get();
    }
    blocks_.emplace_back(new char[next_]);  // (new[] aligns for any fundamental type)
    at_ = blocks_.back().get();
    left_ = next_;
    next_ = std::min<size_t>(next_ * 2, 64 << 10);
    pad = 0;
  }
  char* p = at_ + pad;
  at_ += pad + bytes;
  left_ -= pad + bytes;
  return p;
}

const char* Doc::store(std::string_view s) {
  char* p = static_cast<char*>(take(s.size() + 1));
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  p[s.size()] = '\0';
  return p;
}

const JValue* Doc::store(const JValue* values, size_t count) {
  if (count == 0) return nullptr;
  JValue* p = static_cast<JValue*>(take(count * sizeof(JValue)));
  std::memcpy(static_cast<void*>(p), values, count * sizeof(JValue));
  return p;
}

namespace detail {

constexpr int kDepthLimit = DSPARK_DEPTH_LIMIT;

size_t code_points(std::string_view s, size_t end) {
  size_t n = 0;
  for (size_t i = 0; i < end && i < s.size(); ++i) n += (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80;
  return n;
}

void put_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// -- the scanner: Modules/_json.c's scan_once_unicode and friends, with strict.py's hooks ---------------------

bool ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

struct Scanner {
  Scanner(const char* text, size_t len, Doc& into) : p(text), n(len), doc(into) {}

  const char* p;
  size_t n;
  Doc& doc;
  std::vector<JValue> stack;  // the values of the arrays and objects being read (an object's: name, value)
  std::string scratch;        // a string being read
  // The first error: a JSONDecodeError (msg, pos), or a hook's exception (strict.py's reason, whole).
  enum { NONE, DECODE, HOOK } error = NONE;
  const char* msg = nullptr;
  size_t pos = 0;
  std::string hook_reason;

  bool decode_error(const char* m, size_t at) {
    error = DECODE;
    msg = m;
    pos = at;
    return false;
  }
  bool stop(size_t at) { return decode_error("Expecting value", at); }
  bool hook(std::string reason) {
    error = HOOK;
    hook_reason = std::move(reason);
    return false;
  }
  size_t skip(size_t idx) const {
    while (idx < n && ws(p[idx])) ++idx;
    return idx;
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // scanstring_unicode: `end` is just after the opening quote.
  bool string(size_t end, size_t& next_out, std::string& out, bool& surrogate) {
    const size_t begin = end - 1;
    out.clear();
    surrogate = false;
    while (true) {
      size_t next = end;
      char c = 0;
      for (; next < n; ++next) {
        char d = p[next];
        if (d == '"' || d == '\\') {
          c = d;
          break;
        }
        if (static_cast<unsigned char>(d) <= 0x1f) return decode_error("Invalid control character at", next);
      }
      if (c != '"' && c != '\\') return decode_error("Unterminated string starting at", begin);
      out.append(p + end, next - end);
      ++next;
      if (c == '"') {
        next_out = next;
        return true;
      }
      if (next == n) return decode_error("Unterminated string starting at", begin);
      c = p[next];
      uint32_t code;
      if (c != 'u') {
        end = next + 1;
        switch (c) {
          case '"': code = '"'; break;
          case '\\': code = '\\'; break;
          case '/': code = '/'; break;
          case 'b': code = '\b'; break;
          case 'f': code = '\f'; break;
          case 'n': code = '\n'; break;
          case 'r': code = '\r'; break;
          case 't': code = '\t'; break;
          default: return decode_error("Invalid \\escape", end - 2);
        }
      } else {
        ++next;
        end = next + 4;
        if (end >= n) return decode_error("Invalid \\uXXXX escape", next - 1);
        code = 0;
        for (; next < end; ++next) {
          int h = hex(p[next]);
          if (h < 0) return decode_error("Invalid \\uXXXX escape", end - 5);
          code = (code << 4) | static_cast<uint32_t>(h);
        }
        if (code >= 0xD800 && code <= 0xDBFF && end + 6 < n && p[next] == '\\' && p[next + 1] == 'u') {
          next += 2;
          end += 6;
          uint32_t low = 0;
          for (; next < end; ++next) {
            int h = hex(p[next]);
            if (h < 0) return decode_error("Invalid \\uXXXX escape", end - 5);
            low = (low << 4) | static_cast<uint32_t>(h);
          }
          if (low >= 0xDC00 && low <= 0xDFFF)
            code = 0x10000 + (((code - 0xD800) << 10) | (low - 0xDC00));
          else
            end -= 6;
        }
      }
      if (code >= 0xD800 && code <= 0xDFFF) surrogate = true;
      put_utf8(out, code);
    }
  }

  // strict.py's _float and _int hooks, called as the scanner meets the number.
  bool number_value(std::string text, bool is_float, JValue& out) {
    auto out_of_range = [&]() {
      size_t len = text.size();
      std::string shown = len <= 24 ? text : text.substr(0, 20) + "... (" + std::to_string(len) + " characters)";
      return hook("number out of range for a double: " + shown);
    };
    if (is_float) {
      double d = c_strtod(text);
      if (d == HUGE_VAL || d == -HUGE_VAL) return out_of_range();
      out.type = JValue::FLOAT;
      out.d = d;
      return true;
    }
    if (text.size() - (text[0] == '-') > 309) return out_of_range();
    int64_t i;
    auto r = std::from_chars(text.data(), text.data() + text.size(), i);
    if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
      out.type = JValue::INT;
      out.i = i;
      return true;
    }
    double d = c_strtod(text);  // correctly rounded, as float(int) is: inf exactly when float() overflows
    if (d == HUGE_VAL || d == -HUGE_VAL) return out_of_range();
    out.type = JValue::BIG;
    out.text = doc.store(text);
    out.n = static_cast<uint32_t>(text.size());
    return true;
  }

  bool digit(size_t at) const { return at < n && p[at] >= '0' && p[at] <= '9'; }

  // _match_number_unicode
  bool number(size_t start, size_t& next_out, JValue& out) {
    size_t idx = start;
    const size_t end_idx = n - 1;  // n > start here
    if (p[idx] == '-') {
      ++idx;
      if (idx > end_idx) return stop(start);
    }
    if (p[idx] >= '1' && p[idx] <= '9') {
      ++idx;
      while (idx <= end_idx && digit(idx)) ++idx;
    } else if (p[idx] == '0') {
      ++idx;
    } else {
      return stop(start);
    }
    bool is_float = false;
    if (idx < end_idx && p[idx] == '.' && digit(idx + 1)) {
      is_float = true;
      idx += 2;
      while (idx <= end_idx && digit(idx)) ++idx;
    }
    if (idx < end_idx && (p[idx] == 'e' || p[idx] == 'E')) {
      size_t e_start = idx;
      ++idx;
      if (idx < end_idx && (p[idx] == '-' || p[idx] == '+')) ++idx;
      while (idx <= end_idx && digit(idx)) ++idx;
      if (digit(idx - 1))
        is_float = true;
      else
        idx = e_start;
    }
    next_out = idx;
    return number_value(std::string(p + start, idx - start), is_float, out);
  }

  bool literal(size_t idx, const char* word) const {
    size_t len = std::strlen(word);
    return idx + len - 1 < n && std::memcmp(p + idx, word, len) == 0;
  }

  // scan_once_unicode
  bool value(size_t idx, size_t& next_out, JValue& out, int depth) {
    if (idx >= n) return stop(idx);
    switch (p[idx]) {
      case '"':
        out.type = JValue::STR;
        if (!string(idx + 1, next_out, scratch, out.surrogate)) return false;
        out.text = doc.store(scratch);
        out.n = static_cast<uint32_t>(scratch.size());
        return true;
      case '{':
        if (depth >= kDepthLimit) return hook(DSPARK_TOO_DEEP_REASON);
        return object(idx + 1, next_out, out, depth + 1);
      case '[':
        if (depth >= kDepthLimit) return hook(DSPARK_TOO_DEEP_REASON);
        return array(idx + 1, next_out, out, depth + 1);
      case 'n':
        if (literal(idx, "null")) {
          out.type = JValue::NUL;
          next_out = idx + 4;
          return true;
        }
        break;
      case 't':
        if (literal(idx, "true")) {
          out.type = JValue::TRUE_;
          next_out = idx + 4;
          return true;
        }
        break;
      case 'f':
        if (literal(idx, "false")) {
          out.type = JValue::FALSE_;
          next_out = idx + 5;
          return true;
        }
        break;
      case 'N':
        if (literal(idx, "NaN")) return hook("not JSON: NaN (JSON has no NaN or Infinity)");
        break;
      case 'I':
        if (literal(idx, "Infinity")) return hook("not JSON: Infinity (JSON has no NaN or Infinity)");
        break;
      case '-':
        if (literal(idx, "-Infinity")) return hook("not JSON: -Infinity (JSON has no NaN or Infinity)");
        break;
    }
    return number(idx, next_out, out);
  }

  // The values pushed since `base` become the children of `out`, in the Doc.
  void close(JValue& out, size_t base, size_t count) {
    out.n = static_cast<uint32_t>(count);
    out.kids = doc.store(stack.data() + base, stack.size() - base);
    stack.resize(base);
  }

  // _parse_object_unicode (3.11/3.12: no "Illegal trailing comma" message, that came in 3.13)
  bool object(size_t idx, size_t& next_out, JValue& out, int depth) {
    out.type = JValue::OBJ;
    const size_t base = stack.size();
    size_t members = 0;
    std::unique_ptr<std::unordered_map<std::string_view, size_t>> index;  // for large objects
    idx = skip(idx);
    if (idx >= n || p[idx] != '}') {
      while (true) {
        if (idx >= n || p[idx] != '"')
          return decode_error("Expecting property name enclosed in double quotes", idx);
        size_t next;
        JValue name;
        name.type = JValue::STR;
        if (!string(idx + 1, next, scratch, name.surrogate)) return false;
        idx = skip(next);
        if (idx >= n || p[idx] != ':') return decode_error("Expecting ':' delimiter", idx);
        idx = skip(idx + 1);
        name.text = doc.store(scratch);  // (before the value, whose strings use `scratch` too)
        name.n = static_cast<uint32_t>(scratch.size());
        const std::string_view key = name.str();
        JValue v;
        if (!value(idx, next, v, depth)) return false;
        // A Python dict: a repeated name keeps its place and takes the new value.
        size_t at = members;
        if (index) {
          auto found = index->find(key);
          if (found != index->end()) at = found->second;
        } else {
          for (size_t k = 0; k < members; ++k)
            if (stack[base + 2 * k].str() == key) {
              at = k;
              break;
            }
        }
        if (at == members) {
          stack.push_back(name);
          stack.push_back(v);
          ++members;
          if (index) {
            (*index)[key] = at;
          } else if (members > 16) {
            index = std::make_unique<std::unordered_map<std::string_view, size_t>>();
            for (size_t k = 0; k < members; ++k) (*index)[stack[base + 2 * k].str()] = k;
          }
        } else {
          stack[base + 2 * at + 1] = v;
        }
        idx = skip(next);
        if (idx < n && p[idx] == '}') break;
        if (idx >= n || p[idx] != ',') return decode_error("Expecting ',' delimiter", idx);
        idx = skip(idx + 1);
      }
    }
    close(out, base, members);
    next_out = idx + 1;
    return true;
  }

  bool array(size_t idx, size_t& next_out, JValue& out, int depth) {
    out.type = JValue::ARR;
    const size_t base = stack.size();
    idx = skip(idx);
    if (idx >= n || p[idx] != ']') {
      while (true) {
        size_t next;
        JValue v;
        if (!value(idx, next, v, depth)) return false;
        stack.push_back(v);
        idx = skip(next);
        if (idx < n && p[idx] == ']') break;
        if (idx >= n || p[idx] != ',') return decode_error("Expecting ',' delimiter", idx);
        idx = skip(idx + 1);
      }
    }
    close(out, base, stack.size() - base);
    next_out = idx + 1;
    return true;
  }
};

// -- strict.py's rules, in loads()'s order ---------------------------------------------------------------------

// _SHALLOW.fullmatch(text): at most kDepthLimit levels of brackets outside strings, as the RE2 pattern counts them
// (closers of either kind close a level; an unterminated string or level may run to the end, but a string
// may not end in the middle of an escape).
bool shallow(std::string_view t) {
  int depth = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (c == '"') {
      for (++i; i < t.size() && t[i] != '"'; ++i)
        if (t[i] == '\\') {
          if (i + 1 >= t.size()) return false;
          ++i;
        }
    } else if (c == '[' || c == '{') {
      if (depth == kDepthLimit) return false;
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return true;
}

bool number_prefix(std::string_view s) {  // strict.py's _NUMBER_PREFIX, fully matched
  if (s == "-") return true;
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size()) return false;
  if (s[i] == '0') {
    ++i;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  } else {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  }
  return i == s.size();
}

bool truncated_token(std::string_view text, size_t pos) {  // strict.py's _truncated_token
  std::string_view tail = text.substr(pos);
  if (!tail.empty())
    for (std::string_view literal : {"true", "false", "null"})
      if (literal.substr(0, tail.size()) == tail) return true;
  size_t start = pos;
  while (start > 0 && std::strchr("0123456789+-.eE", text[start - 1]) && text[start - 1] != '\0') --start;
  std::string_view number = text.substr(start);
  if (!number.empty() && number_prefix(number)) return true;
  if (!tail.empty() && tail[0] == 'u' && pos > 0 && text[pos - 1] == '\\' && tail.size() < 5) {
    for (char c : tail.substr(1))
      if (Scanner::hex(c) < 0) return false;
    return true;
  }
  return false;
}

std::string without_at(const char* msg) {
  std::string m(msg);
  if (m.size() >= 3 && m.compare(m.size() - 3, 3, " at") == 0) m.resize(m.size() - 3);
  return m;
}

// strict.py's _syntax_reason
std::string syntax_reason(std::string_view text, const char* msg, size_t pos) {
  if (std::strcmp(msg, "Extra data") == 0)
    return "trailing data after the JSON value at char " + std::to_string(code_points(text, pos));
  if (pos >= text.size() || std::strncmp(msg, "Unterminated string", 19) == 0 || truncated_token(text, pos))
    return "truncated JSON: input ends at char " + std::to_string(code_points(text, text.size())) + " (" +
           without_at(msg) + ")";
  return "not JSON: " + without_at(msg) + " at char " + std::to_string(code_points(text, pos));
}

void display_path_push(std::string& out, std::string_view name) {
  if (!out.empty()) out.push_back('.');
  out.append(name);
}

// An unpaired surrogate, kept as its three bytes ED A0..BF xx (valid UTF-8 has none: a pair is joined).
bool has_surrogate(std::string_view s) {
  for (size_t b = 0; b + 1 < s.size(); ++b)
    if (static_cast<unsigned char>(s[b]) == 0xED && static_cast<unsigned char>(s[b + 1]) >= 0xA0) return true;
  return false;
}

// strict.py's _check_strings: the first unpaired surrogate in a string or a name, in the dict's order.
bool check_strings(const JValue& v, std::string& path, Rejection& why) {
  auto fail = [&]() {
    why.reason = "invalid string: unpaired surrogate escape";
    why.has_field = !path.empty();
    why.field = path;
    why.category = DSPARK_NOT_JSON;
    return false;
  };
  if (v.type == JValue::STR) return v.surrogate ? fail() : true;
  if (v.type != JValue::ARR && v.type != JValue::OBJ) return true;
  for (size_t k = 0; k < v.size(); ++k) {
    size_t mark = path.size();
    if (v.type == JValue::OBJ) {
      if (has_surrogate(v.key(k))) return fail();
      display_path_push(path, v.key(k));
    } else {
      path += "[" + std::to_string(k) + "]";
    }
    if (!check_strings(v.item(k), path, why)) return false;
    path.resize(mark);
  }
  return true;
}

}  // namespace detail

// strict.py's loads(text). `category` of the reasons: the core's verdicts.
bool loads(std::string_view text, Doc& doc, Rejection& why) {
  using namespace detail;
  if (text.size() > UINT32_MAX) throw std::length_error("a JSON text over 4 GiB");  // (n counts in 32 bits)
  JValue& out = doc.root;
  auto reject = [&](std::string reason, int category) {
    why.reason = std::move(reason);
    why.has_field = false;
    why.category = category;
    return false;
  };
  size_t first = 0;
  while (first < text.size() && ws(text[first])) ++first;
  if (first == text.size()) return reject("empty", DSPARK_NOT_JSON);
  size_t brackets = 0;  // '[' (0x5b) and '{' (0x7b) are the bytes b with b | 0x20 == 0x7b: a loop that vectorizes
  for (char c : text) brackets += (static_cast<unsigned char>(c) | 0x20) == 0x7b;
  if (brackets > static_cast<size_t>(kDepthLimit) && !shallow(text))
    return reject(DSPARK_TOO_DEEP_REASON, DSPARK_TOO_DEEP);
  if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0)
    return reject("not JSON: a byte order mark (U+FEFF) at char 0", DSPARK_BYTE_ORDER_MARK);
  Scanner scanner(text.data(), text.size(), doc);
  size_t end;
  if (!scanner.value(first, end, out, 0)) {
    if (scanner.error == Scanner::HOOK) {
      bool deep = scanner.hook_reason.compare(0, 6, "nested") == 0;
      return reject(scanner.hook_reason, deep ? DSPARK_TOO_DEEP : DSPARK_NOT_JSON);
    }
    return reject(syntax_reason(text, scanner.msg, scanner.pos), DSPARK_NOT_JSON);
  }
  end = scanner.skip(end);
  if (end != text.size()) return reject(syntax_reason(text, "Extra data", end), DSPARK_NOT_JSON);
  if (text.find("\\ud") != std::string_view::npos || text.find("\\uD") != std::string_view::npos) {
    std::string path;
    if (!check_strings(out, path, why)) return false;
  }
  return true;
}

// json.dumps(value, ensure_ascii=False, separators=(",", ":")) of a loaded value.
void json_text(std::string& out, const JValue& v) {
  switch (v.type) {
    case JValue::NUL: out.append("null"); return;
    case JValue::FALSE_: out.append("false"); return;
    case JValue::TRUE_: out.append("true"); return;
    case JValue::INT: out.append(std::to_string(v.i)); return;
    case JValue::BIG: out.append(v.str()); return;
    case JValue::FLOAT: write_double(out, v.d); return;
    case JValue::STR: write_string(out, v.str()); return;
    case JValue::ARR:
      out.push_back('[');
      for (size_t k = 0; k < v.size(); ++k) {
        if (k) out.push_back(',');
        json_text(out, v.item(k));
      }
      out.push_back(']');
      return;
    case JValue::OBJ:
      out.push_back('{');
      for (size_t k = 0; k < v.size(); ++k) {
        if (k) out.push_back(',');
        write_string(out, v.key(k));
        out.push_back(':');
        json_text(out, v.item(k));
      }
      out.push_back('}');
      return;
  }
}

// strict.py's loads(text), its value appended to `out` as json_text writes it (true), or why not (false).
bool compact_json(std::string_view text, std::string& out, Rejection& why) {
  Doc doc;
  if (!loads(text, doc, why)) return false;
  json_text(out, doc.root);
  return true;
}

// repr() of a str (unicode_repr): the quote it picks, escapes, non-printable characters as \x, \u, \U.
std::string py_repr(std::string_view s) {
  bool single = s.find('\'') != std::string_view::npos, dbl = s.find('"') != std::string_view::npos;
  char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  static const char hex[] = "0123456789abcdef";
  auto escape = [&](char kind, uint32_t c, int digits) {
    out.push_back('\\');
    out.push_back(kind);
    for (int k = digits - 1; k >= 0; --k) out.push_back(hex[(c >> (4 * k)) & 15]);
  };
  for (size_t i = 0; i < s.size();) {
    unsigned char b = static_cast<unsigned char>(s[i]);
    uint32_t c;
    size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    if (i + len > s.size()) len = s.size() - i;
    c = len == 1 ? b : b & (0xFF >> (len + 1));
    for (size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (c == static_cast<uint32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c < ' ' || c == 0x7F) {
      escape('x', c, 2);
    } else if (c < 0x7F) {
      out.push_back(static_cast<char>(c));
    } else {
      size_t lo = 0, hi = sizeof kUnprintable / sizeof kUnprintable[0];
      bool printable = true;
      while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < kUnprintable[mid][0]) {
          hi = mid;
        } else if (c > kUnprintable[mid][1]) {
          lo = mid + 1;
        } else {
          printable = false;
          break;
        }
      }
      if (printable)
        out.append(s.substr(i, len));
      else if (c <= 0xFF)
        escape('x', c, 2);
      else if (c <= 0xFFFF)
        escape('u', c, 4);
      else
        escape('U', c, 8);
    }
    i += len;
  }
  out.push_back(quote);
  return out;
}

}  // namespace dspark_exact
