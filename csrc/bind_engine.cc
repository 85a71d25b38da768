// Bindings of the engine core: argument checks, GIL release around work, buffers without
// copies. No logic lives here (see csrc/engine/*.h). Parse states cross as (set, lexer, pending).
// Errors cross typed: every error the core or these checks raise becomes a lexguide.errors
// class (CoreError below; LimitError -> LimitExceeded; VocabFileError -> VocabFileError), with
// its location when known (a rule, symbol, lexeme, token, byte, state, row or node).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "engine/captures.h"
#include "engine/lexparser.h"
#include "engine/mask.h"
#include "engine/matcher.h"
#include "engine/split.h"

namespace nb = nanobind;
using namespace lexguide;

namespace {

// An error for Python: `cls` names its lexguide.errors class (CoreGrammarError,
// CoreRegexError, CoreVocabularyError, CoreArgumentError, CoreIndexError), `where` what
// locates it (passed to the class as keywords, e.g. rule=3, symbol=-9).
struct CoreError : std::runtime_error {
  const char* cls;
  std::vector<std::pair<const char*, int64_t>> where;
  CoreError(const char* c, const std::string& msg, std::vector<std::pair<const char*, int64_t>> w = {})
      : std::runtime_error(msg), cls(c), where(std::move(w)) {}
};

// Runs f; the std::invalid_argument / std::out_of_range of the core's own checks become
// CoreErrors: `cls` for the former, CoreIndexError for the latter.
template <class F>
decltype(auto) typed(const char* cls, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const std::invalid_argument& e) {
    throw CoreError(cls, e.what());
  } catch (const std::out_of_range& e) {
    throw CoreError("CoreIndexError", e.what());
  }
}

using State = std::tuple<int32_t, uint32_t, bool>;
using MaskArray = nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>;
using OutRow = nb::ndarray<uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OutRows = nb::ndarray<uint32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

// The rules of a Python sequence of (lhs, rhs) pairs (the IR's Rule tuples) as lhs and rhs
// arrays, read with the C API: nanobind's generic casters copy each tuple subclass into a new
// list first, which made reading the rules cost as much as the rest of a lowering.
void read_rules(nb::handle rules, std::vector<int32_t>& lhs, std::vector<std::vector<int32_t>>& rhs) {
  PyObject* seq = PySequence_Fast(rules.ptr(), "rules must be a sequence");
  if (!seq) throw nb::python_error();
  nb::object seq_owner = nb::steal(seq);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject** items = PySequence_Fast_ITEMS(seq);
  Py_ssize_t i = 0;
  auto as_symbol = [&i](PyObject* o) -> int32_t {
    if (!PyLong_Check(o)) throw nb::type_error("a rule's symbols are ints");
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    if (v < INT32_MIN || v > INT32_MAX)
      throw CoreError("CoreGrammarError", "symbol out of range", {{"rule", int64_t(i)}});
    return int32_t(v);
  };
  lhs.reserve(size_t(n));
  rhs.reserve(size_t(n));
  for (; i < n; ++i) {
    PyObject* r = items[i];
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) throw nb::type_error("a rule is a (lhs, rhs) tuple");
    lhs.push_back(as_symbol(PyTuple_GET_ITEM(r, 0)));
    PyObject* side = PySequence_Fast(PyTuple_GET_ITEM(r, 1), "a rule's right side must be a sequence");
    if (!side) throw nb::python_error();
    nb::object side_owner = nb::steal(side);
    const Py_ssize_t m = PySequence_Fast_GET_SIZE(side);
    PyObject** xs = PySequence_Fast_ITEMS(side);
    std::vector<int32_t>& out = rhs.emplace_back(size_t(m));
    for (Py_ssize_t j = 0; j < m; ++j) out[size_t(j)] = as_symbol(xs[j]);
  }
}

// The rules' symbols against the grammar's sizes (nonterminal x >= 0, lexeme l as -1 - l), so
// that an error names the rule and the symbol.
void check_rules(const std::vector<int32_t>& lhs, const std::vector<std::vector<int32_t>>& rhs,
                 int32_t n_nonterminals, size_t n_lexemes) {
  for (size_t r = 0; r < lhs.size(); r++) {
    if (lhs[r] < 0 || lhs[r] >= n_nonterminals)
      throw CoreError("CoreGrammarError", "left side is not a nonterminal of the grammar",
                      {{"rule", int64_t(r)}, {"symbol", lhs[r]}});
    for (int32_t x : rhs[r])
      if (x >= n_nonterminals || (x < 0 && size_t(-1 - int64_t(x)) >= n_lexemes))
        throw CoreError("CoreGrammarError",
                        x >= 0 ? "nonterminal out of range" : "lexeme out of range",
                        {{"rule", int64_t(r)}, {"symbol", x}});
  }
}

ParseState to_state(const State& s) {
  if (std::get<0>(s) < 0) throw CoreError("CoreArgumentError", "not a live parse state");
  return ParseState{std::get<0>(s), std::get<1>(s), std::get<2>(s)};
}
std::optional<State> from_state(const std::optional<ParseState>& s) {
  if (!s) return std::nullopt;
  return State{s->set_id, s->lexer_state, s->pending};
}

// A vocabulary plus the walkers of the generations grammars on it use (one per lexer DFA).
// Mask engines own their walker; this list only finds it again, so a generation no grammar
// uses any more is freed with its walker.
struct VocabHandle {
  std::shared_ptr<const Vocab> vocab;
  std::mutex mu;
  std::vector<std::pair<std::weak_ptr<LexerDFA>, std::weak_ptr<Walker>>> walkers;

  std::shared_ptr<Walker> walker_for(const std::shared_ptr<LexerDFA>& dfa) {
    std::lock_guard<std::mutex> g(mu);
    std::shared_ptr<Walker> found;
    for (auto it = walkers.begin(); it != walkers.end();) {
      auto live = it->first.lock();
      auto w = it->second.lock();
      if (!live || !w) {
        it = walkers.erase(it);
        continue;
      }
      if (live == dfa) found = w;
      ++it;
    }
    if (found) return found;
    auto w = std::make_shared<Walker>(vocab, dfa);
    walkers.emplace_back(dfa, w);
    return w;
  }
};

struct TokenBytesHandle {
  std::shared_ptr<const TokenBytes> tokens;
};

VocabKey to_key(nb::bytes key) {
  VocabKey k;
  if (key.size() != k.size()) throw CoreError("CoreVocabularyError", "a vocabulary key is 32 bytes");
  std::memcpy(k.data(), key.c_str(), k.size());
  return k;
}

struct LexParserHandle {
  std::shared_ptr<LexParser> lp;
};

// lexguide._core.CaptureTable: a grammar's capture marks (engine/captures.h).
struct CaptureTableHandle {
  std::shared_ptr<LexParser> lp;
  std::shared_ptr<const CaptureTable> table;
};

// A generation: a lexer DFA and its regex store (lexer.h), shared by the grammars lowered into it.
struct GenerationHandle {
  std::shared_ptr<LexerDFA> dfa;
};

// The regex queries and constructors of a generation's store, for the front ends
// (lexguide.regex.nodes is their facade). Every call takes store_mutex(); nodes cross as ids
// (RegexId, regex.h), each checked to be one of the store's; byte sets cross as 32
// little-endian bytes (bit b of byte b / 8 is byte value b).
struct RegexCalls {
  // The node of `id` in rs: CoreRegexError for an id of another generation (whose index may
  // name another regex here), CoreIndexError for an unknown node.
  static NodeId node(const RegexStore& rs, RegexId id) {
    NodeId x = RegexStore::index_of(id);
    if (!rs.id_ok(id))
      throw CoreError("CoreRegexError",
                      "regex id of another generation (this one is " + std::to_string(rs.tag()) +
                          "): its regex store was replaced, so the id names no regex here; build "
                          "regexes inside the compile that uses them (lexguide.regex.nodes.building)",
                      {{"node", x}, {"generation", RegexStore::tag_of(id)}});
    if (x >= rs.n_nodes()) throw CoreError("CoreIndexError", "unknown regex node", {{"node", x}});
    return x;
  }
  static std::vector<NodeId> nodes(const RegexStore& rs, const std::vector<RegexId>& ids) {
    std::vector<NodeId> out(ids.size());
    for (size_t i = 0; i < ids.size(); i++) out[i] = node(rs, ids[i]);
    return out;
  }
  static ByteSet to_set(nb::bytes b) {
    if (b.size() != 32) throw CoreError("CoreRegexError", "a byte set is 32 bytes");
    ByteSet m;
    std::memcpy(m.w.data(), b.c_str(), 32);
    return m;
  }
  static nb::bytes from_set(const ByteSet& m) { return nb::bytes(reinterpret_cast<const char*>(m.w.data()), 32); }
  static uint32_t bound(int64_t v) {  // a repetition bound: -1 unbounded
    if (v < -1 || v >= int64_t(kInf)) throw CoreError("CoreRegexError", "repetition bound out of range");
    return v < 0 ? kInf : uint32_t(v);
  }
};

// A grammar on a vocabulary, and what its matchers share (engine/matcher.h).
struct MaskEngineHandle {
  std::shared_ptr<MaskEngine> engine;
  uint32_t n_words;
  std::shared_ptr<const MatcherTables> tables;
};

// RegexCalls::node under store_mutex()
NodeId node_of_id(const RegexStore& rs, RegexId id) {
  std::lock_guard<std::recursive_mutex> g(store_mutex());
  return RegexCalls::node(rs, id);
}

void check_lexer_state(LexParser& lp, uint32_t s) {
  if (s >= lp.lexer().n_states()) throw CoreError("CoreIndexError", "unknown lexer state", {{"state", s}});
}

void check_state(LexParser& lp, const State& st) {
  if (std::get<0>(st) < 0 || uint32_t(std::get<0>(st)) >= lp.parser().n_sets())
    throw CoreError("CoreIndexError", "unknown parser set", {{"set", std::get<0>(st)}});
  check_lexer_state(lp, std::get<1>(st));
}

void check_byte(uint32_t b) {
  if (b > 255) throw CoreError("CoreArgumentError", "byte out of range", {{"byte", b}});
}

void check_lexemes(LexParser& lp, const std::vector<int32_t>& lexemes) {
  for (int32_t l : lexemes)
    if (l < 0 || size_t(l) >= lp.n_lexemes())
      throw CoreError("CoreIndexError", "lexeme index out of range", {{"lexeme", l}});
}

// One piece of consumed input for read_captures(): bytes (appended to `data`) or the
// special-token lexemes of a special token (any iterable of lexeme indices).
CapturePiece read_capture_piece(LexParser& lp, nb::handle piece, const std::optional<State>& after,
                                std::string& data) {
  CapturePiece p;
  if (PyBytes_Check(piece.ptr())) {
    p.n_bytes = uint32_t(PyBytes_GET_SIZE(piece.ptr()));
    data.append(PyBytes_AS_STRING(piece.ptr()), p.n_bytes);
  } else {
    nb::object items = nb::steal(PySequence_List(piece.ptr()));
    if (!items.is_valid()) throw nb::python_error();
    p.special = true;
    p.lexemes = nb::cast<std::vector<int32_t>>(items);
    check_lexemes(lp, p.lexemes);
    std::sort(p.lexemes.begin(), p.lexemes.end());
    p.lexemes.erase(std::unique(p.lexemes.begin(), p.lexemes.end()), p.lexemes.end());
  }
  if (after) {
    check_state(lp, *after);
    p.after = to_state(*after);
  }
  return p;
}

// A view of a cached mask, no copy: the array keeps the mask alive (Python marks it read-only).
MaskArray shared_numpy(std::shared_ptr<const std::vector<uint32_t>> words) {
  auto* keep = new std::shared_ptr<const std::vector<uint32_t>>(std::move(words));
  nb::capsule owner(keep, [](void* p) noexcept {
    delete static_cast<std::shared_ptr<const std::vector<uint32_t>>*>(p);
  });
  return MaskArray(const_cast<uint32_t*>((*keep)->data()), {(*keep)->size()}, owner);
}

MaskArray to_numpy(const std::vector<uint32_t>& words) {
  auto* data = new uint32_t[words.size()];
  std::memcpy(data, words.data(), words.size() * 4);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint32_t*>(p); });
  return MaskArray(data, {words.size()}, owner);
}

}  // namespace

// For bind_matcher.cc: the tables a lexguide._core.MaskEngine's matchers share (a TypeError
// for another object), and a CoreArgumentError naming `key`.
std::shared_ptr<const MatcherTables> matcher_tables(nb::handle engine) {
  if (!nb::isinstance<MaskEngineHandle>(engine)) throw nb::type_error("not a lexguide._core.MaskEngine");
  return nb::cast<MaskEngineHandle&>(engine).tables;
}
[[noreturn]] void throw_argument_error(const std::string& message, const char* key, int64_t value) {
  throw CoreError("CoreArgumentError", message, {{key, value}});
}

void bind_engine(nb::module_& m) {
  // C++ errors become the package's typed errors (lexguide.errors)
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    auto raise = [](nb::object cls, nb::object err) { PyErr_SetObject(cls.ptr(), err.ptr()); };
    try {
      std::rethrow_exception(p);
    } catch (const LimitError& e) {
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("lexguide.errors").attr("LimitExceeded");
      raise(cls, cls(e.limit, e.value, e.what()));
    } catch (const CoreError& e) {
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("lexguide.errors").attr(e.cls);
      nb::dict where;
      for (auto& [k, v] : e.where) where[k] = v;
      raise(cls, cls(e.what(), **where));
    } catch (const VocabFileError& e) {
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("lexguide.errors").attr("VocabFileError");
      raise(cls, cls(e.what()));
    } catch (const std::out_of_range& e) {  // only the engine throws it (not the kernels)
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("lexguide.errors").attr("CoreIndexError");
      raise(cls, cls(e.what()));
    }
  });

  using RC = RegexCalls;
  using Nodes = std::vector<RegexId>;
  // a store call: the lock, then f(store)
  auto with = [](GenerationHandle& h, auto&& f) {
    std::lock_guard<std::recursive_mutex> g(store_mutex());
    return typed("CoreRegexError", [&] { return f(h.dfa->regex()); });
  };
  nb::class_<GenerationHandle>(m, "Generation")
      .def("bytes", [with](GenerationHandle& h, nb::bytes m) {
        ByteSet set = RC::to_set(m);
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.bytes(set)); });
      }, "One byte of the set (32 little-endian bytes of a 256-bit mask); NOTHING when empty.")
      .def("literal", [with](GenerationHandle& h, nb::bytes data) {
        return with(h, [&](RegexStore& rs) {
          return rs.id_of(rs.literal(reinterpret_cast<const uint8_t*>(data.c_str()), data.size()));
        });
      }, "Exactly the byte string data.")
      .def("concat", [with](GenerationHandle& h, const Nodes& xs) {
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.concat(RC::nodes(rs, xs))); });
      }, "Concatenation of the nodes (right-nested, EPSILON removed, NOTHING absorbing).")
      .def("concat2", [with](GenerationHandle& h, RegexId x, RegexId y) {
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.concat2(RC::node(rs, x), RC::node(rs, y))); });
      }, "concat([x, y]).")
      .def("alt", [with](GenerationHandle& h, const Nodes& xs) {
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.alt(RC::nodes(rs, xs))); });
      }, "Alternation (flattened, byte sets merged, sorted, deduplicated).")
      .def("intersect", [with](GenerationHandle& h, const Nodes& xs) {
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.intersect(RC::nodes(rs, xs))); });
      }, "Intersection (flattened, byte sets merged, sorted, deduplicated).")
      .def("complement", [with](GenerationHandle& h, RegexId x) {
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.complement(RC::node(rs, x))); });
      }, "Every byte string x does not match.")
      .def("star", [with](GenerationHandle& h, RegexId x) {
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.star(RC::node(rs, x))); });
      }, "Zero or more x.")
      .def("repeat", [with](GenerationHandle& h, RegexId x, int64_t lo, int64_t hi) {
        if (lo < 0) throw CoreError("CoreRegexError", "repetition bound out of range");
        uint32_t l = RC::bound(lo), u = RC::bound(hi);
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.repeat_checked(RC::node(rs, x), l, u)); });
      }, nb::arg("x"), nb::arg("lo"), nb::arg("hi"),
         "x{lo,hi} (hi -1: unbounded); LimitExceeded max_repeat for nested counters past the limit.")
      .def("kind", [with](GenerationHandle& h, RegexId x) {
        return with(h, [&](RegexStore& rs) { return int(rs.kind(RC::node(rs, x))); });
      }, "The node's kind (0 NOTHING, 1 EPS, 2 BYTES, 3 CONCAT, 4 ALT, 5 AND, 6 NOT, 7 STAR, 8 REPEAT).")
      .def("args", [](GenerationHandle& h, RegexId id) {
        std::lock_guard<std::recursive_mutex> g(store_mutex());
        RegexStore& rs = h.dfa->regex();
        NodeId x = RC::node(rs, id);
        RxKind k = rs.kind(x);
        if (k == K_BYTES) return nb::make_tuple(RC::from_set(rs.bytes_of(x)));
        const uint32_t* a = rs.children(x);
        if (k == K_REPEAT) return nb::make_tuple(rs.id_of(a[0]), a[1], a[2] == kInf ? int64_t(-1) : int64_t(a[2]));
        nb::list out;
        for (uint32_t i = 0; i < rs.n_children(x); i++) out.append(rs.id_of(a[i]));
        return nb::tuple(out);
      }, "The node's operands: (mask bytes,) for BYTES, (child, lo, hi or -1) for REPEAT, the "
         "children otherwise.")
      .def("nullable", [with](GenerationHandle& h, RegexId x) {
        return with(h, [&](RegexStore& rs) { return rs.nullable(RC::node(rs, x)); });
      }, "Whether x matches the empty string.")
      .def("has_boolean", [with](GenerationHandle& h, RegexId x) {
        return with(h, [&](RegexStore& rs) { return rs.has_boolean(RC::node(rs, x)); });
      }, "Whether x has an & or ~ subterm.")
      .def("derivative", [with](GenerationHandle& h, RegexId x, uint32_t b) {
        check_byte(b);
        return with(h, [&](RegexStore& rs) { return rs.id_of(rs.derivative(RC::node(rs, x), b)); });
      }, "The Brzozowski derivative of x by byte b.")
      .def("matches", [with](GenerationHandle& h, RegexId x, nb::bytes data) {
        return with(h, [&](RegexStore& rs) {
          return rs.matches(RC::node(rs, x), reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
        });
      }, "Whether x matches all of data.")
      .def("byte_partition", [with](GenerationHandle& h, RegexId x) {
        std::array<uint8_t, 256> label, rep;
        with(h, [&](RegexStore& rs) {
          const Partition& p = rs.partition(rs.partition_id(RC::node(rs, x)));
          label = p.label;
          rep = p.rep;
          return 0;
        });
        return nb::make_tuple(nb::bytes(reinterpret_cast<const char*>(label.data()), 256),
                              nb::bytes(reinterpret_cast<const char*>(rep.data()), 256));
      }, "(labels, reps): the class label of every byte (byte 0 has label 0, labels by first "
         "use) and the smallest byte of its class; bytes of one class have one derivative.")
      .def("nonempty", [with](GenerationHandle& h, RegexId x) {
        return with(h, [&](RegexStore& rs) { return rs.nonempty(RC::node(rs, x)); });
      }, "Whether x matches some byte string (bounded search: past kNonEmptyBudget states, "
         "assumed so).")
      .def("nonempty_many", [with](GenerationHandle& h, const Nodes& xs) {
        return with(h, [&](RegexStore& rs) {
          std::vector<bool> out;
          for (NodeId x : RC::nodes(rs, xs)) out.push_back(rs.nonempty(x));
          return out;
        });
      }, "nonempty() of each node, under one lock.")
      .def("copy_nodes", [with](GenerationHandle& h, GenerationHandle& from, const Nodes& roots) {
        return with(h, [&](RegexStore& rs) {
          const RegexStore& src = from.dfa->regex();
          std::vector<RegexId> out;
          for (NodeId x : rs.copy_from(src, RC::nodes(src, roots))) out.push_back(rs.id_of(x));
          return out;
        });
      }, nb::arg("source"), nb::arg("roots"),
         "The nodes `roots` of generation `source`'s store rebuilt in this one (its ids).")
      .def_prop_ro("n_nodes", [](GenerationHandle& h) {
        std::lock_guard<std::recursive_mutex> g(store_mutex());
        return h.dfa->regex().n_nodes();
      })
      .def_prop_ro("serial", [](GenerationHandle& h) { return h.dfa->serial(); })
      .def("fix_base", [](GenerationHandle& h) {
        std::lock_guard<std::recursive_mutex> g(store_mutex());
        return h.dfa->regex().fix_base();
      }, "Fix the store's base (once; later calls return it): ids of the nodes made from now on "
         "carry the store's tag, so they are refused by every other generation. Returns it.")
      .def_prop_ro("tag", [](GenerationHandle& h) { return h.dfa->regex().tag(); },
                   "The tag in the high 32 bits of the store's ids past its base.")
      .def_prop_ro("stats", [](GenerationHandle& h) {
        std::lock_guard<std::recursive_mutex> g(store_mutex());
        nb::dict d;
        d["serial"] = h.dfa->serial();
        d["regex_nodes"] = h.dfa->regex().n_nodes();
        d["regex_bytes"] = h.dfa->regex().memory_bytes();
        d["lexer_states"] = h.dfa->n_states();
        d["lexer_bytes"] = h.dfa->memory_bytes();
        return d;
      });
  m.def("generation", [] { return GenerationHandle{current_generation()}; },
        "The current generation: the store the front ends build regexes in and new grammars "
        "are lowered into.");
  m.def("generation_past_marks", &generation_past_marks, nb::arg("rotate_nodes"),
        "Whether the current generation has more than kRotateLexerStates lexer states, "
        "rotate_nodes regex nodes or kRotateGenerationBytes bytes.");
  m.def("next_generation", [](size_t keep) { return GenerationHandle{next_generation(keep)}; },
        nb::arg("keep"),
        "Start a new current generation whose store keeps the current one's first `keep` "
        "nodes (same ids); grammars lowered into the old one keep it alive.");
  m.def("set_regex_limits", [](uint32_t max_nodes, uint32_t max_repeat) {
        regex_limits().max_nodes.store(max_nodes);
        regex_limits().max_repeat.store(max_repeat);
      }, nb::arg("max_nodes"), nb::arg("max_repeat"),
      "Set the limits of every regex store (max_rx_nodes, max_repeat).");
  m.attr("REGEX_LIMITS") = nb::make_tuple(kMaxRegexNodes, kMaxRepeat, kRotateRegexNodes);
  m.def(
      "productive_rules",
      [](int32_t n_nonterminals, const std::vector<bool>& lexeme_ok, nb::handle rules) {
        std::vector<int32_t> lhs;
        std::vector<std::vector<int32_t>> rhs;
        read_rules(rules, lhs, rhs);
        if (n_nonterminals < 0) throw CoreError("CoreGrammarError", "negative nonterminal count");
        check_rules(lhs, rhs, n_nonterminals, lexeme_ok.size());
        return typed("CoreGrammarError", [&] { return productive_rules(n_nonterminals, lexeme_ok, lhs, rhs); });
      },
      nb::arg("n_nonterminals"), nb::arg("lexeme_ok"), nb::arg("rules"),
        "Indices (ascending) of the rules (lhs, rhs) whose symbols can all derive some input, "
        "lexeme i counting as productive when lexeme_ok[i]. CoreGrammarError (a ValueError) for "
        "a symbol out of range, naming the rule; TypeError for a rule that is not an (int, "
        "sequence of ints) pair.");
  m.def("n_generations", &LexerDFA::n_alive,
        "Generations alive: the current one plus old ones some grammar still uses.");
  m.attr("VocabFileError") = nb::module_::import_("lexguide.errors").attr("VocabFileError");
  m.def("set_engine_threads", &set_engine_threads, nb::arg("n"),
        "Size the engine's thread pool (fill_masks' threads; clamped to 1..1024), waiting for a "
        "call running on it.");
  m.def("engine_threads", &engine_threads, "The engine's thread pool size.");
  m.attr("VOCAB_FILE_ABI") = vocab_file_abi();
  nb::class_<TokenBytesHandle>(m, "TokenBytes")
      .def(
          "__init__",
          [](TokenBytesHandle* self, nb::tuple tokens) {
            // two passes over the tuple: boundaries (and types), then one copy per token
            size_t n = tokens.size();
            std::vector<uint32_t> offsets(n + 1, 0);
            uint64_t total = 0;
            for (size_t i = 0; i < n; i++) {
              PyObject* o = PyTuple_GET_ITEM(tokens.ptr(), Py_ssize_t(i));
              if (!PyBytes_CheckExact(o)) throw nb::type_error(("token " + std::to_string(i) + " is not bytes").c_str());
              if (uint64_t(PyBytes_GET_SIZE(o)) > kMaxTokenBytes)
                throw CoreError("CoreVocabularyError",
                                "token " + std::to_string(i) + " is longer than " +
                                    std::to_string(kMaxTokenBytes) + " bytes",
                                {{"token", int64_t(i)}});
              total += uint64_t(PyBytes_GET_SIZE(o));
              if (total > UINT32_MAX)
                throw CoreError("CoreVocabularyError", "vocabulary bytes exceed 4 GiB", {{"token", int64_t(i)}});
              offsets[i + 1] = uint32_t(total);
            }
            std::string blob(size_t(total), '\0');
            for (size_t i = 0; i < n; i++) {
              PyObject* o = PyTuple_GET_ITEM(tokens.ptr(), Py_ssize_t(i));
              std::memcpy(&blob[offsets[i]], PyBytes_AS_STRING(o), offsets[i + 1] - offsets[i]);
            }
            auto tb = typed("CoreVocabularyError",
                            [&] { return std::make_shared<TokenBytes>(std::move(blob), std::move(offsets)); });
            new (self) TokenBytesHandle{std::move(tb)};
          },
          nb::arg("token_bytes"), "Every token's bytes (a tuple of exact bytes) in one flat buffer.")
      .def("__len__", [](TokenBytesHandle& t) { return t.tokens->size(); })
      .def_prop_ro("max_len", [](TokenBytesHandle& t) { return t.tokens->max_len(); })
      .def_prop_ro(
          "blob",
          [](nb::handle_t<TokenBytesHandle> h) {
            auto& t = *nb::cast<TokenBytesHandle*>(h)->tokens;
            return nb::ndarray<nb::numpy, const uint8_t, nb::ndim<1>>(
                reinterpret_cast<const uint8_t*>(t.blob().data()), {t.blob().size()}, h);
          },
          "The tokens' bytes back to back (a read-only view).")
      .def_prop_ro(
          "offsets",
          [](nb::handle_t<TokenBytesHandle> h) {
            auto& t = *nb::cast<TokenBytesHandle*>(h)->tokens;
            return nb::ndarray<nb::numpy, const uint32_t, nb::ndim<1>>(t.offsets().data(), {t.offsets().size()}, h);
          },
          "Token i is blob[offsets[i]:offsets[i + 1]] (a read-only view).");

  nb::class_<VocabHandle>(m, "Vocab")
      .def(
          "__init__",
          [](VocabHandle* self, TokenBytesHandle& tokens, const std::vector<uint32_t>& eos,
             const std::vector<uint32_t>& special) {
            new (self) VocabHandle();
            nb::gil_scoped_release nogil;
            self->vocab = typed("CoreVocabularyError",
                                [&] { return std::make_shared<Vocab>(tokens.tokens, eos, special); });
          },
          nb::arg("token_bytes"), nb::arg("eos_ids"), nb::arg("special_ids"), "Build the tries and slices.")
      .def_static(
          "load",
          [](const std::string& path, TokenBytesHandle& tokens, const std::vector<uint32_t>& eos,
             const std::vector<uint32_t>& special, nb::bytes key) {
            VocabKey k = to_key(key);
            std::shared_ptr<Vocab> v;
            {
              nb::gil_scoped_release nogil;
              v = typed("CoreVocabularyError", [&] { return Vocab::load(path, tokens.tokens, eos, special, k); });
            }
            auto* h = new VocabHandle();
            h->vocab = std::move(v);
            return h;
          },
          nb::arg("path"), nb::arg("token_bytes"), nb::arg("eos_ids"), nb::arg("special_ids"), nb::arg("key"),
          nb::rv_policy::take_ownership,
          "The vocabulary saved at path for these tokens and key; VocabFileError says why not.")
      .def(
          "save",
          [](VocabHandle& v, const std::string& path, nb::bytes key) {
            VocabKey k = to_key(key);
            nb::gil_scoped_release nogil;
            v.vocab->save(path, k);
          },
          nb::arg("path"), nb::arg("key"), "Write the cache file (VocabFileError on failure).")
      .def("same_as", [](VocabHandle& a, VocabHandle& b) { return *a.vocab == *b.vocab; },
           "Same tokens, ids and preprocessed tables.")
      .def_prop_ro("n_tokens", [](VocabHandle& v) { return v.vocab->n_tokens(); })
      .def_prop_ro("n_words", [](VocabHandle& v) { return v.vocab->n_words(); })
      .def_prop_ro("n_trie_nodes", [](VocabHandle& v) { return v.vocab->trie().n_nodes(); })
      .def_prop_ro("memory_bytes", [](VocabHandle& v) { return v.vocab->memory_bytes(); });

  nb::class_<LexParserHandle>(m, "LexParser")
      .def(
          "__init__",
          [](LexParserHandle* self, GenerationHandle& gen, int32_t n_nonterminals, int32_t start,
             nb::handle rules,
             const std::vector<std::tuple<RegexId, int32_t, bool, int64_t, bool, bool>>& lexemes,
             const std::vector<int64_t>& skips, bool allow_initial_skip, bool ignore_once) {
            GrammarRules g;
            g.n_nonterminals = n_nonterminals;
            g.start = start;
            read_rules(rules, g.lhs, g.rhs);  // the IR's Rule tuples, (lhs, rhs)
            check_rules(g.lhs, g.rhs, n_nonterminals, lexemes.size());
            std::vector<LexemeSpec> specs;
            for (auto& [rx_id, cls, lazy, budget, tok, eos] : lexemes) {
              NodeId rx = node_of_id(gen.dfa->regex(), rx_id);
              if (cls < 0 || size_t(cls) >= skips.size())
                throw CoreError("CoreGrammarError", "lexeme class out of range",
                                {{"lexeme", int64_t(specs.size())}, {"class", cls}});
              specs.push_back(LexemeSpec{rx, cls, lazy, budget, tok, eos});
              g.lexeme_class.push_back(cls);
            }
            std::vector<NodeId> sk;
            for (int64_t s : skips) {
              sk.push_back(s < 0 ? 0xFFFFFFFFu : node_of_id(gen.dfa->regex(), RegexId(s)));
            }
            new (self) LexParserHandle();
            nb::gil_scoped_release nogil;
            self->lp = typed("CoreGrammarError", [&] {
              return std::make_shared<LexParser>(gen.dfa, std::move(g), std::move(specs), std::move(sk),
                                                 GrammarOptionsCore{allow_initial_skip, ignore_once});
            });
          })
      .def_prop_ro("initial", [](LexParserHandle& h) {
        ParseState s = h.lp->initial();
        return State{s.set_id, s.lexer_state, s.pending};
      })
      .def("advance_byte",
           [](LexParserHandle& h, const State& st, uint32_t b) {
             check_state(*h.lp, st);
             check_byte(b);
             return from_state(h.lp->advance_byte(to_state(st), b));
           })
      .def("advance_bytes",
           [](LexParserHandle& h, const State& st, nb::bytes data) {
             check_state(*h.lp, st);
             return from_state(h.lp->advance_bytes(to_state(st), reinterpret_cast<const uint8_t*>(data.c_str()), data.size()));
           })
      .def("advance_token_lexeme",
           [](LexParserHandle& h, const State& st, std::vector<int32_t> lexemes) {
             check_state(*h.lp, st);
             check_lexemes(*h.lp, lexemes);
             std::sort(lexemes.begin(), lexemes.end());
             return from_state(h.lp->advance_token_lexeme(to_state(st), lexemes));
           })
      .def("expected_token_lexemes",
           [](LexParserHandle& h, const State& st) {
             check_state(*h.lp, st);
             return h.lp->expected_token_lexemes(to_state(st));
           })
      .def("allowed_bytes",
           [](LexParserHandle& h, const State& st) {
             check_state(*h.lp, st);
             bool out[256];
             h.lp->allowed_bytes(to_state(st), out);
             std::string r(256, '\0');
             for (int i = 0; i < 256; i++) r[i] = out[i] ? 1 : 0;
             return nb::bytes(r.data(), r.size());
           })
      .def("is_accepting",
           [](LexParserHandle& h, const State& st) {
             check_state(*h.lp, st);
             return h.lp->is_accepting(to_state(st));
           })
      .def("can_continue",
           [](LexParserHandle& h, const State& st) {
             check_state(*h.lp, st);
             return h.lp->can_continue(to_state(st));
           })
      .def("accepts",
           [](LexParserHandle& h, nb::bytes data) {
             std::string d(data.c_str(), data.size());
             nb::gil_scoped_release nogil;
             return h.lp->accepts(reinterpret_cast<const uint8_t*>(d.data()), d.size());
           })
      .def("finish",
           [](LexParserHandle& h, int32_t set_id, uint32_t s) {
             check_state(*h.lp, State{set_id, s, false});
             std::lock_guard<std::recursive_mutex> g(h.lp->mu());
             return h.lp->finish(set_id, s);
           })
      .def("finish_accepted",
           [](LexParserHandle& h, int32_t set_id, const std::vector<uint32_t>& accepting) {
             check_state(*h.lp, State{set_id, 0, false});
             std::lock_guard<std::recursive_mutex> g(h.lp->mu());
             return h.lp->finish_accepted(set_id, accepting);
           })
      .def("lexer_start",
           [](LexParserHandle& h, int32_t set_id, int mode, std::vector<int32_t> skipped) {
             check_state(*h.lp, State{set_id, 0, false});
             check_lexemes(*h.lp, skipped);
             std::sort(skipped.begin(), skipped.end());
             std::lock_guard<std::recursive_mutex> g(h.lp->mu());
             return h.lp->lexer_start(set_id, mode, skipped);
           })
      // the parser
      .def("scan",
           [](LexParserHandle& h, int32_t set_id, std::vector<int32_t> lexemes) {
             check_state(*h.lp, State{set_id, 0, false});
             check_lexemes(*h.lp, lexemes);
             std::sort(lexemes.begin(), lexemes.end());
             lexemes.erase(std::unique(lexemes.begin(), lexemes.end()), lexemes.end());
             std::lock_guard<std::recursive_mutex> g(h.lp->mu());
             return h.lp->parser().scan(set_id, lexemes);
           })
      .def("expected",
           [](LexParserHandle& h, int32_t set_id) {
             check_state(*h.lp, State{set_id, 0, false});
             std::lock_guard<std::recursive_mutex> g(h.lp->mu());
             return h.lp->parser().expected(set_id);
           })
      .def("set_accepting",
           [](LexParserHandle& h, int32_t set_id) {
             check_state(*h.lp, State{set_id, 0, false});
             std::lock_guard<std::recursive_mutex> g(h.lp->mu());
             return h.lp->parser().is_accepting(set_id);
           })
      .def_prop_ro("n_sets",
                   [](LexParserHandle& h) {
                     std::lock_guard<std::recursive_mutex> g(h.lp->mu());
                     return h.lp->parser().n_sets();
                   })
      .def_prop_ro("chain_limit_hits", [](LexParserHandle& h) { return h.lp->chain_limit_hits; })
      // local/global lexemes
      .def("locals_of", [](LexParserHandle& h, uint32_t g) { return h.lp->locals_of(g); })
      .def("is_skip", [](LexParserHandle& h, int32_t local) { return h.lp->is_skip(local); })
      .def_prop_ro("budgets",
                   [](LexParserHandle& h) {
                     std::vector<std::pair<uint32_t, int64_t>> out;
                     for (uint32_t g : h.lp->budgeted()) out.emplace_back(g, h.lp->lexer().budget(g));
                     return out;
                   })
      .def_prop_ro("eos_lexemes", [](LexParserHandle& h) { return h.lp->eos_lexemes(); })
      // the lexer DFA (shared by grammars)
      .def("lexer_next",
           [](LexParserHandle& h, uint32_t s, uint32_t b) {
             check_lexer_state(*h.lp, s);
             check_byte(b);
             return h.lp->lexer().next(s, b);
           })
      .def("lexer_accepting",
           [](LexParserHandle& h, uint32_t s) {
             check_lexer_state(*h.lp, s);
             return h.lp->lexer().state(s).accepting;
           })
      .def("lexer_accepts_lazy",
           [](LexParserHandle& h, uint32_t s) {
             check_lexer_state(*h.lp, s);
             return h.lp->lexer().accepts_lazy(s);
           })
      .def("lexer_alive",
           [](LexParserHandle& h, uint32_t s) {
             check_lexer_state(*h.lp, s);
             std::vector<uint32_t> out;
             for (auto& e : h.lp->lexer().state(s).entries) out.push_back(e.first);
             return out;
           })
      .def("lexer_can_extend",
           [](LexParserHandle& h, uint32_t s) {
             check_lexer_state(*h.lp, s);
             return h.lp->lexer().can_extend(s);
           })
      .def("lexer_without_extensions",
           [](LexParserHandle& h, uint32_t s, const std::vector<uint32_t>& lexemes) {
             check_lexer_state(*h.lp, s);
             return h.lp->lexer().without_extensions(s, lexemes);
           })
      .def_prop_ro("lexer_n_states", [](LexParserHandle& h) { return h.lp->lexer().n_states(); });

  nb::class_<CaptureTableHandle>(m, "CaptureTable")
      .def(
          "__init__",
          [](CaptureTableHandle* self, LexParserHandle& lp, std::vector<int32_t> nonterminal_names,
             const std::vector<std::tuple<int32_t, int32_t, int64_t, int64_t>>& lexemes) {
            std::vector<LexemeCapture> caps;
            for (auto& [name, stop_name, body, tail] : lexemes) {
              const RegexStore& rs = lp.lp->lexer().regex();  // the grammar's generation
              caps.push_back({name, stop_name, body < 0 ? kNoRegex : node_of_id(rs, RegexId(body)),
                              tail < 0 ? kNoRegex : node_of_id(rs, RegexId(tail))});
            }
            new (self) CaptureTableHandle{lp.lp, nullptr};
            self->table = typed("CoreGrammarError", [&] {
              return std::make_shared<const CaptureTable>(*lp.lp, std::move(nonterminal_names), std::move(caps));
            });
          },
          nb::arg("lexparser"), nb::arg("nonterminal_names"), nb::arg("lexemes"))
      .def(
          "read",
          [](CaptureTableHandle& h, const std::vector<std::pair<nb::object, std::optional<State>>>& pieces,
             bool final, uint64_t max_items, uint64_t max_steps) {
            std::string data;
            std::vector<CapturePiece> ps;
            ps.reserve(pieces.size());
            for (auto& [piece, after] : pieces) ps.push_back(read_capture_piece(*h.lp, piece, after, data));
            std::vector<Capture> found;
            {
              nb::gil_scoped_release nogil;
              try {
                found = read_captures(*h.lp, *h.table, data, ps, final, CaptureLimits{max_items, max_steps});
              } catch (const CaptureError& e) {
                throw CoreError("CoreArgumentError", e.what(), {{"byte", int64_t(e.byte)}});
              } catch (const std::invalid_argument& e) {
                throw CoreError("CoreArgumentError", e.what());
              }
            }
            std::vector<std::tuple<int32_t, uint32_t, uint32_t>> out;
            out.reserve(found.size());
            for (const Capture& c : found) out.emplace_back(c.name, c.start, c.end);
            return out;
          },
          nb::arg("pieces"), nb::arg("final"), nb::arg("max_items") = kMaxCaptureItems,
          nb::arg("max_steps") = kMaxCaptureSteps,
          "(name id, start, end) of every capture in the pieces' bytes (engine/captures.h).");

  nb::class_<MaskEngineHandle>(m, "MaskEngine")
      .def(
          "__init__",
          [](MaskEngineHandle* self, LexParserHandle& lp, VocabHandle& vocab,
             std::vector<std::pair<int32_t, std::vector<uint32_t>>> token_lexeme_ids) {
            const uint32_t n_tokens = vocab.vocab->n_tokens();
            for (auto& [lex, ids] : token_lexeme_ids) {
              if (lex < 0 || size_t(lex) >= lp.lp->n_lexemes() || !lp.lp->is_token_lexeme(lex))
                throw CoreError("CoreGrammarError", "not a token lexeme", {{"lexeme", lex}});
              for (uint32_t id : ids)
                if (id >= n_tokens)
                  throw CoreError("CoreVocabularyError", "token id outside the vocabulary",
                                  {{"lexeme", lex}, {"token", id}});
            }
            new (self) MaskEngineHandle();
            self->engine = typed("CoreGrammarError", [&] {
              return std::make_shared<MaskEngine>(lp.lp, vocab.walker_for(lp.lp->lexer_ptr()),
                                                  std::move(token_lexeme_ids));
            });
            self->n_words = vocab.vocab->n_words();
            self->tables = std::make_shared<const MatcherTables>(self->engine);
          })
      .def("mask",
           [](MaskEngineHandle& h, const State& st) {
             check_state(h.engine->lexparser(), st);
             std::shared_ptr<const std::vector<uint32_t>> m;
             {
               nb::gil_scoped_release nogil;
               m = h.engine->mask(to_state(st));
             }
             return shared_numpy(std::move(m));
           })
      .def(
          "fill",
          [](MaskEngineHandle& h, const State& st, OutRow out) {
            check_state(h.engine->lexparser(), st);
            if (out.shape(0) != h.n_words)
              throw CoreError("CoreArgumentError", "mask buffer has the wrong length", {{"length", int64_t(out.shape(0))}});
            nb::gil_scoped_release nogil;
            h.engine->fill(to_state(st), out.data());
          },
          nb::arg("state"), nb::arg("out").noconvert())
      .def("budget_mask",
           [](MaskEngineHandle& h, const State& st, uint32_t left) -> nb::object {
             check_state(h.engine->lexparser(), st);
             std::vector<uint32_t> m;
             bool narrowed;
             {
               nb::gil_scoped_release nogil;
               narrowed = h.engine->budget_mask(to_state(st), left, m);
             }
             if (!narrowed) return nb::none();  // the plain mask applies
             return nb::cast(to_numpy(m));
           })
      .def("min_completion",
           [](MaskEngineHandle& h, const State& st) {
             check_state(h.engine->lexparser(), st);
             uint32_t r = h.engine->min_completion(to_state(st));
             return r == UINT32_MAX ? std::optional<uint32_t>() : std::optional<uint32_t>(r);
           })
      .def("advance_token",
           [](MaskEngineHandle& h, const State& st, uint32_t token) {
             check_state(h.engine->lexparser(), st);
             return from_state(h.engine->advance_token(to_state(st), token));
           })
      .def("token_lexemes_of", [](MaskEngineHandle& h, uint32_t token) { return h.engine->token_lexemes_of(token); })
      .def("inside_end_states",
           [](MaskEngineHandle& h, uint32_t s) {
             check_lexer_state(h.engine->lexparser(), s);
             std::vector<uint32_t> ids, ends;
             {
               nb::gil_scoped_release nogil;
               h.engine->walker().inside_end_states(s, ids, ends);
             }
             return std::make_pair(ids, ends);
           })
      .def_prop_rw(
          "direct_walk_nodes", [](MaskEngineHandle& h) { return h.engine->direct_walk_nodes; },
          [](MaskEngineHandle& h, uint32_t n) { h.engine->direct_walk_nodes = n; })
      .def_prop_ro("stats", [](MaskEngineHandle& h) {
        nb::dict d;
        d["hits"] = h.engine->hits;
        d["misses"] = h.engine->misses;
        d["masks"] = h.engine->n_cached();
        d["lexer_walks"] = h.engine->walker().n_walks();
        d["walk_bytes"] = h.engine->walker().memory_bytes();
        d["nodes_walked"] = h.engine->walker().nodes_walked.load();
        d["split_walks"] = h.engine->walker().split_walks.load();
        d["loop_walks"] = h.engine->walker().loop_walks.load();
        d["run_walks"] = h.engine->walker().run_walks.load();
        d["plain_walks"] = h.engine->walker().plain_walks.load();
        d["eternal_states"] = h.engine->walker().eternal_states.load();
        d["bounded_states"] = h.engine->walker().bounded_states.load();
        d["direct_nodes"] = h.engine->direct_nodes;
        d["boundaries"] = h.engine->boundaries;
        d["lexer_states"] = h.engine->lexparser().lexer().n_states();
        d["completions_structural"] = h.engine->completions_structural;
        d["completions_byte_search"] = h.engine->completions_byte_search;
        d["completions_none"] = h.engine->completions_none;
        d["budget_levels"] = h.engine->budget_levels_computed;
        return d;
      });

  m.def(
      "fill_masks",
      [](const std::vector<std::pair<MaskEngineHandle*, State>>& items, OutRows out, uint32_t n_threads) {
        if (out.shape(0) < items.size())
          throw CoreError("CoreArgumentError", "mask buffer has fewer rows than matchers",
                          {{"rows", int64_t(out.shape(0))}});
        for (size_t i = 0; i < items.size(); i++) {
          auto& [h, st] = items[i];
          if (!h) throw CoreError("CoreArgumentError", "no engine", {{"row", int64_t(i)}});
          check_state(h->engine->lexparser(), st);
          if (out.shape(1) != h->n_words)
            throw CoreError("CoreArgumentError", "mask buffer rows have the wrong length", {{"row", int64_t(i)}});
        }
        std::vector<MaskRow> rows;
        rows.reserve(items.size());
        for (size_t i = 0; i < items.size(); i++)
          rows.push_back(MaskRow{items[i].first->engine.get(), to_state(items[i].second),
                                 out.data() + i * out.shape(1)});
        nb::gil_scoped_release nogil;
        fill_mask_rows(rows, n_threads);
      },
      nb::arg("items"), nb::arg("out").noconvert(), nb::arg("n_threads") = 1);

  m.def(
      "mask_logits",
      [](nb::ndarray<nb::ndim<2>, nb::device::cpu> logits,
         nb::ndarray<nb::ndim<2>, nb::c_contig, nb::device::cpu> bitmask, const std::vector<int64_t>& rows) {
        // logits: (B, V) float32 / float16 / bfloat16, unit column stride (any row stride);
        // bitmask: (R, n_words) 32-bit ints; rows: R indices into B (empty: R == B, in order)
        auto dt = logits.dtype();
        bool f32 = dt == nb::dtype<float>();
        bool f16 = dt.code == uint8_t(nb::dlpack::dtype_code::Float) && dt.bits == 16 && dt.lanes == 1;
        bool bf16 = dt.code == uint8_t(nb::dlpack::dtype_code::Bfloat) && dt.bits == 16 && dt.lanes == 1;
        auto bad = [](const char* msg) { throw CoreError("CoreArgumentError", msg); };
        if (!f32 && !f16 && !bf16) bad("logits must be float32, float16 or bfloat16");
        if (logits.shape(1) > 1 && logits.stride(1) != 1) bad("logits rows must be contiguous");
        if (logits.stride(0) < 0) bad("logits must have a non-negative row stride");
        auto bt = bitmask.dtype();
        if (bt != nb::dtype<int32_t>() && bt != nb::dtype<uint32_t>())
          bad("bitmask must hold 32-bit integers");
        size_t n_logit_rows = logits.shape(0);
        std::vector<int64_t> all;
        const std::vector<int64_t>* which = &rows;
        if (rows.empty()) {
          all.resize(n_logit_rows);
          for (size_t i = 0; i < n_logit_rows; i++) all[i] = int64_t(i);
          which = &all;
        }
        if (bitmask.shape(0) != which->size()) bad("bitmask rows and row indices differ in number");
        for (int64_t r : *which)
          if (r < 0 || size_t(r) >= n_logit_rows)
            throw CoreError("CoreArgumentError", "row index out of range", {{"row", r}});
        size_t n_cols = logits.shape(1), row_stride = size_t(logits.stride(0)), n_words = bitmask.shape(1);
        auto words = static_cast<const uint32_t*>(bitmask.data());
        nb::gil_scoped_release nogil;
        if (f32)
          mask_logits<uint32_t>(static_cast<uint32_t*>(logits.data()), n_cols, row_stride, words, n_words,
                                which->data(), which->size(), 0xFF800000u);
        else
          mask_logits<uint16_t>(static_cast<uint16_t*>(logits.data()), n_cols, row_stride, words, n_words,
                                which->data(), which->size(), uint16_t(f16 ? 0xFC00u : 0xFF80u));
      },
      nb::arg("logits").noconvert(), nb::arg("bitmask").noconvert(), nb::arg("rows"));
}
