#include "tools/anchor_records.h"

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>

namespace winnow::tools {
namespace {

// One JSON value. Objects keep their members in order; arrays are read (a future field
// may hold one) but no record field here is an array.
struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<std::string> keys;     // Object: member names
  std::vector<JsonValue> values;     // Object: member values; Array: items

  const JsonValue* member(const std::string& key) const {
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) return &values[i];
    return nullptr;
  }
};

const char* kind_name(JsonValue::Kind k) {
  switch (k) {
    case JsonValue::Kind::Null: return "null";
    case JsonValue::Kind::Bool: return "a boolean";
    case JsonValue::Kind::Number: return "a number";
    case JsonValue::Kind::String: return "a string";
    case JsonValue::Kind::Array: return "an array";
    case JsonValue::Kind::Object: return "an object";
  }
  return "?";
}

// A thrown message without the file and line (the caller adds them).
struct LineError {
  std::string what;
};

// Recursive descent over one line. Nesting is limited so a hostile line cannot exhaust the
// stack.
class LineParser {
 public:
  explicit LineParser(std::string_view s) : s_(s) {}

  JsonValue document() {
    space();
    JsonValue v = value(0);
    space();
    if (at_ < s_.size()) fail("text after the JSON object");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 16;

  [[noreturn]] void fail(const std::string& what) const {
    throw LineError{fmt::format("{} (column {})", what, at_ + 1)};
  }
  void space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\r')) ++at_;
  }
  bool take(std::string_view word) {
    if (s_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }
  void expect(char c, const char* where) {
    space();
    if (at_ >= s_.size() || s_[at_] != c) fail(fmt::format("expected '{}' {}", c, where));
    ++at_;
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) fail("nested deeper than 16 levels");
    space();
    if (at_ >= s_.size()) fail("unexpected end of line");
    JsonValue v;
    const char c = s_[at_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') {
      v.kind = JsonValue::Kind::String;
      v.text = string();
      return v;
    }
    if (take("true") || take("false")) {
      v.kind = JsonValue::Kind::Bool;
      v.boolean = c == 't';
      return v;
    }
    if (take("null")) return v;
    // Python's json.dumps writes these for non-finite floats.
    if (take("NaN")) return number_value(std::numeric_limits<double>::quiet_NaN());
    if (take("Infinity")) return number_value(std::numeric_limits<double>::infinity());
    if (take("-Infinity")) return number_value(-std::numeric_limits<double>::infinity());
    if (c == '-' || (c >= '0' && c <= '9')) return number_value(number());
    fail(fmt::format("unexpected '{}'", c));
  }

  static JsonValue number_value(double x) {
    JsonValue v;
    v.kind = JsonValue::Kind::Number;
    v.number = x;
    return v;
  }

  // JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  double number() {
    const size_t start = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      return at_ > from;
    };
    if (s_[at_] == '-') ++at_;
    if (at_ < s_.size() && s_[at_] == '0') ++at_;
    else if (!digits()) fail("a number needs digits");
    if (at_ < s_.size() && s_[at_] == '.') {
      ++at_;
      if (!digits()) fail("a number needs digits after '.'");
    }
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      if (!digits()) fail("a number needs digits in its exponent");
    }
    double x = 0;
    const auto [end, ec] = std::from_chars(s_.data() + start, s_.data() + at_, x);
    if (ec != std::errc{} || end != s_.data() + at_) fail("a number out of range");
    return x;
  }

  unsigned hex4() {
    if (at_ + 4 > s_.size()) fail("\\u needs four hex digits");
    unsigned u = 0;
    const auto [end, ec] = std::from_chars(s_.data() + at_, s_.data() + at_ + 4, u, 16);
    if (ec != std::errc{} || end != s_.data() + at_ + 4) fail("\\u needs four hex digits");
    at_ += 4;
    return u;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    for (;;) {
      if (at_ >= s_.size()) fail("a string without its closing quote");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) fail("a string without its closing quote");
      switch (const char e = s_[at_++]) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && take("\\u")) {
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("a lone surrogate in \\u escapes");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xD800 && cp < 0xE000) {
            fail("a lone surrogate in \\u escapes");
          }
          append_utf8(out, cp);
          break;
        }
        default: --at_; fail(fmt::format("unknown escape '\\{}'", e));
      }
    }
  }

  JsonValue object(int depth) {
    ++at_;  // '{'
    JsonValue v;
    v.kind = JsonValue::Kind::Object;
    space();
    if (at_ < s_.size() && s_[at_] == '}') return ++at_, v;
    for (;;) {
      space();
      if (at_ >= s_.size() || s_[at_] != '"') fail("expected a quoted key");
      std::string key = string();
      if (v.member(key)) fail(fmt::format("the key \"{}\" appears twice", key));
      expect(':', fmt::format("after the key \"{}\"", key).c_str());
      v.values.push_back(value(depth + 1));
      v.keys.push_back(std::move(key));
      space();
      if (at_ < s_.size() && s_[at_] == ',') {
        ++at_;
        continue;
      }
      expect('}', "or ',' after a member");
      return v;
    }
  }

  JsonValue array(int depth) {
    ++at_;  // '['
    JsonValue v;
    v.kind = JsonValue::Kind::Array;
    space();
    if (at_ < s_.size() && s_[at_] == ']') return ++at_, v;
    for (;;) {
      v.values.push_back(value(depth + 1));
      space();
      if (at_ < s_.size() && s_[at_] == ',') {
        ++at_;
        continue;
      }
      expect(']', "or ',' after an item");
      return v;
    }
  }

  std::string_view s_;
  size_t at_ = 0;
};

const JsonValue& field(const JsonValue& obj, const char* key, JsonValue::Kind kind) {
  const JsonValue* v = obj.member(key);
  if (!v) throw LineError{fmt::format("a record needs \"{}\"", key)};
  if (v->kind != kind)
    throw LineError{fmt::format("\"{}\" must be {}, not {}", key, kind_name(kind),
                                kind_name(v->kind))};
  return *v;
}

AnchorParams params_of(const JsonValue& obj) {
  AnchorParams out;
  for (size_t i = 0; i < obj.keys.size(); ++i) {
    const JsonValue& v = obj.values[i];
    AnchorValue a;
    switch (v.kind) {
      case JsonValue::Kind::Null: break;
      case JsonValue::Kind::Bool: a = v.boolean; break;
      case JsonValue::Kind::Number: a = v.number; break;
      case JsonValue::Kind::String: a = v.text; break;
      default:
        throw LineError{fmt::format("params \"{}\" must be a number, string, boolean or null, "
                                    "not {}", obj.keys[i], kind_name(v.kind))};
    }
    out.emplace_back(obj.keys[i], std::move(a));
  }
  return out;
}

// What one line holds: a record (timed or failed) or a note.
void take_line(const JsonValue& v, int line, AnchorFile& file) {
  if (v.kind != JsonValue::Kind::Object)
    throw LineError{fmt::format("expected a JSON object, got {}", kind_name(v.kind))};
  if (!v.member("workload") && !v.member("impl")) {
    const JsonValue* note = v.member("note");
    if (!note) throw LineError{"neither a record (\"workload\", \"impl\") nor a \"note\""};
    file.notes.push_back({line, note->kind == JsonValue::Kind::String ? note->text : ""});
    return;
  }
  AnchorRecord r;
  r.line = line;
  r.workload = field(v, "workload", JsonValue::Kind::String).text;
  r.impl = field(v, "impl", JsonValue::Kind::String).text;
  r.params = params_of(field(v, "params", JsonValue::Kind::Object));
  if (const JsonValue* gpu = v.member("gpu"); gpu && gpu->kind == JsonValue::Kind::String)
    r.gpu = gpu->text;
  if (const JsonValue* error = v.member("error")) {
    r.error = error->kind == JsonValue::Kind::String ? error->text : "(not a string)";
    if (r.error.empty()) r.error = "(empty)";
  } else {
    r.ms_median = field(v, "ms_median", JsonValue::Kind::Number).number;
    if (!std::isfinite(r.ms_median) || r.ms_median <= 0)
      throw LineError{fmt::format("\"ms_median\" must be a positive time, got {}", r.ms_median)};
  }
  file.records.push_back(std::move(r));
}

}  // namespace

int AnchorFile::timed() const {
  int n = 0;
  for (const AnchorRecord& r : records) n += r.error.empty();
  return n;
}

int AnchorFile::failed() const { return int(records.size()) - timed(); }

std::string params_text(const AnchorParams& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    out += (out.empty() ? "" : " ") + key + "=";
    if (const double* x = std::get_if<double>(&value)) out += fmt::format("{}", *x);
    else if (const std::string* s = std::get_if<std::string>(&value)) out += *s;
    else if (const bool* b = std::get_if<bool>(&value)) out += *b ? "true" : "false";
    else out += "null";
  }
  return out;
}

AnchorFile parse_anchor_records(const std::string& text, const std::string& path) {
  AnchorFile file;
  file.path = path;
  int line = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view s(text.data() + at, end - at);
    ++line;
    at = end + 1;
    if (s.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    try {
      take_line(LineParser(s).document(), line, file);
    } catch (const LineError& e) {
      throw AnchorFileError(fmt::format("{}:{}: {}", path, line, e.what));
    }
  }
  // Two timed records of one problem and impl: the ratio would depend on which is taken.
  for (size_t i = 0; i < file.records.size(); ++i) {
    const AnchorRecord& r = file.records[i];
    for (size_t j = 0; j < i && r.error.empty(); ++j) {
      const AnchorRecord& o = file.records[j];
      if (o.error.empty() && o.workload == r.workload && o.impl == r.impl && o.params == r.params)
        throw AnchorFileError(fmt::format(
            "{}:{}: a second {} {} record for {} (the first is line {}): keep one run's "
            "records per file",
            path, r.line, r.workload, r.impl, params_text(r.params), o.line));
    }
  }
  if (file.timed() == 0)
    throw AnchorFileError(fmt::format(
        "{}: no timed record ({} lines: {} notes, {} records with an error)", path, line,
        file.notes.size(), file.failed()));
  return file;
}

AnchorFile read_anchor_records(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw AnchorFileError(fmt::format("{}: cannot read it: a directory", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw AnchorFileError(fmt::format("{}: cannot read it: {}", path, std::strerror(errno)));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw AnchorFileError(fmt::format("{}: cannot read it", path));
  return parse_anchor_records(text, path);
}

}  // namespace winnow::tools
