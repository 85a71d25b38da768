// Bindings of the matcher (engine/matcher.h): argument checks, GIL release around work, masks
// handed out as read-only views of the memoised ones. No logic lives here. Parse states cross as
// (set, lexer, pending). A rejected token becomes lexguide.errors.TokenRejected, a rollback past
// the start MatcherError; argument errors are bind_engine.cc's CoreArgumentError.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <exception>

#include "engine/matcher.h"

namespace nb = nanobind;
using namespace lexguide;

// bind_engine.cc's: the tables of a lexguide._core.MaskEngine, a typed argument error
std::shared_ptr<const MatcherTables> matcher_tables(nb::handle engine);
[[noreturn]] void throw_argument_error(const std::string& message, const char* key, int64_t value);

namespace {

using State = std::tuple<int32_t, uint32_t, bool>;
using MaskView = nb::ndarray<nb::numpy, const uint32_t, nb::ndim<1>>;
using OutRow = nb::ndarray<uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using OutRows = nb::ndarray<uint32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Remaining = std::optional<int64_t>;

State to_tuple(ParseState s) { return State{s.set_id, s.lexer_state, s.pending}; }

// A read-only view of a shared mask, no copy: the array keeps the mask alive.
MaskView view(std::shared_ptr<const std::vector<uint32_t>> words) {
  auto* keep = new std::shared_ptr<const std::vector<uint32_t>>(std::move(words));
  nb::capsule owner(keep, [](void* p) noexcept {
    delete static_cast<std::shared_ptr<const std::vector<uint32_t>>*>(p);
  });
  return MaskView((*keep)->data(), {(*keep)->size()}, owner);
}

uint32_t n_words_of(const Matcher& m) { return m.tables().vocab().n_words(); }

}  // namespace

void bind_matcher(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const TokenRejection& e) {
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("lexguide.errors").attr("TokenRejected");
      PyErr_SetObject(cls.ptr(), cls(e.token, e.what()).ptr());
    } catch (const MatcherStateError& e) {
      nb::gil_scoped_acquire gil;
      nb::object cls = nb::module_::import_("lexguide.errors").attr("MatcherError");
      PyErr_SetObject(cls.ptr(), cls(e.what()).ptr());
    }
  });

  m.attr("MAX_FORCED_BYTES") = kMaxForcedBytes;

  nb::class_<Matcher>(m, "Matcher")
      .def("__init__", [](Matcher* self, nb::handle engine) { new (self) Matcher(matcher_tables(engine)); },
           nb::arg("engine"), "A matcher at the start of a MaskEngine's grammar.")
      .def("clone", [](const Matcher& a) { return Matcher(a); }, "An independent copy.")
      .def_prop_ro("state", [](const Matcher& a) { return to_tuple(a.state()); })
      .def_prop_ro("n_consumed", &Matcher::n_consumed)
      .def_prop_ro("tokens", [](const Matcher& a) { return a.tokens(); }, "Tokens consumed, EOS excluded.")
      .def_prop_ro("n_tokens", [](const Matcher& a) { return a.tokens().size(); },
                   "Tokens consumed, EOS excluded (the history holds n_tokens + 1 states).")
      .def_prop_ro("eos_consumed", &Matcher::eos_consumed)
      .def_prop_ro("has_budgets", [](const Matcher& a) { return a.tables().has_budgets(); })
      .def("is_accepting", &Matcher::is_accepting)
      .def("is_stopped", &Matcher::is_stopped)
      .def("consume", &Matcher::consume, nb::arg("token"), nb::call_guard<nb::gil_scoped_release>())
      .def("consume_tokens", &Matcher::consume_tokens, nb::arg("tokens"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("validate_tokens", &Matcher::validate_tokens, nb::arg("tokens"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("rollback", &Matcher::rollback, nb::arg("n"))
      .def("reset", &Matcher::reset)
      .def("compute_mask",
           [](Matcher& a, Remaining remaining) {
             std::shared_ptr<const std::vector<uint32_t>> words;
             {
               nb::gil_scoped_release nogil;
               words = a.mask(remaining);
             }
             return view(std::move(words));
           },
           nb::arg("remaining") = nb::none())
      .def(
          "fill_mask",
          [](Matcher& a, OutRow out, Remaining remaining) {
            if (out.shape(0) != n_words_of(a))
              throw_argument_error("mask buffer has the wrong length", "length", int64_t(out.shape(0)));
            nb::gil_scoped_release nogil;
            a.fill_mask(out.data(), remaining);
          },
          nb::arg("out").noconvert(), nb::arg("remaining") = nb::none())
      .def("is_allowed", &Matcher::is_allowed, nb::arg("token"), nb::call_guard<nb::gil_scoped_release>())
      .def("min_completion", &Matcher::min_completion, nb::call_guard<nb::gil_scoped_release>())
      .def("forced_bytes",
           [](Matcher& a) {
             std::string out;
             {
               nb::gil_scoped_release nogil;
               out = a.forced_bytes();
             }
             return nb::bytes(out.data(), out.size());
           })
      .def("history",
           [](const Matcher& a) {
             nb::list states;
             for (const ParseState& s : a.history()) states.append(nb::make_tuple(s.set_id, s.lexer_state, s.pending));
             return nb::make_tuple(nb::cast(a.tokens()), states, nb::cast(a.token_lexeme_scans()));
           },
           "(consumed tokens, states, scans): states[0] is the initial state, states[i + 1] the "
           "state after tokens[i] (EOS excluded), scans[i] the special-token lexemes tokens[i] "
           "was read as (empty: its bytes were read).");

  m.def(
      "fill_matcher_masks",
      [](nb::list matchers, OutRows out, uint32_t n_threads, std::optional<std::vector<Remaining>> remaining) {
        // matchers[i] (None: row i is left alone) -> row i of out
        const size_t n = matchers.size();
        if (out.shape(0) < n)
          throw_argument_error("mask buffer has fewer rows than matchers", "rows", int64_t(out.shape(0)));
        if (remaining && remaining->size() != n)
          throw_argument_error("one remaining budget per matcher", "length", int64_t(remaining->size()));
        std::vector<Matcher*> ms(n, nullptr);
        for (size_t i = 0; i < n; i++) {
          if (matchers[i].is_none()) continue;
          if (!nb::isinstance<Matcher>(matchers[i]))
            throw nb::type_error(("matchers[" + std::to_string(i) + "] is not a lexguide._core.Matcher").c_str());
          ms[i] = nb::cast<Matcher*>(matchers[i]);
          if (out.shape(1) != n_words_of(*ms[i]))
            throw_argument_error("mask buffer rows have the wrong length", "row", int64_t(i));
        }
        nb::gil_scoped_release nogil;
        fill_matcher_masks(ms, remaining ? *remaining : std::vector<Remaining>(), out.data(),
                           out.shape(1), n_threads);
      },
      nb::arg("matchers"), nb::arg("out").noconvert(), nb::arg("n_threads") = 1,
      nb::arg("remaining") = nb::none());
}
