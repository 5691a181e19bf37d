// jax-ipu's own host implementation of the Poplar vertex API that codelets are written against:
// poplar::Vertex, MultiVertex, Input/Output/InOut fields of scalars, Vector and VectorList,
// VectorLayout. Written for jax_ipu.tile (no Graphcore code): a codelet compiled with it runs on
// the host inside the XLA:CPU program of the IPU Model, one vertex per tile row; a MultiVertex's
// workers run at once on host threads (jax_ipu/tile/native/workers.cc).
#ifndef JAX_IPU_POPLAR_VERTEX_HPP
#define JAX_IPU_POPLAR_VERTEX_HPP

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include <jax_ipu/workers.hpp>
#include <poplar/HalfFloat.hpp>

namespace poplar {

// Memory layouts of vector fields. On the chip they choose how a field's pointer and size are
// encoded; on the host every layout is a plain pointer and a size.
enum class VectorLayout { ONE_PTR, SPAN, SCALED_PTR32, SCALED_PTR64, SCALED_PTR128,
                          COMPACT_PTR, COMPACT_DELTAN, DELTAN };
enum class VectorListLayout { DELTAN, DELTANELEMENTS, COMPACT_DELTAN, COMPACT_DELTANELEMENTS,
                              ONE_PTR };

// A vertex runs its compute() once on its tile; a MultiVertex runs compute(workerId) on each of
// the tile's worker threads at once.
class Vertex {};
class SupervisorVertex : public Vertex {};
class MultiVertex : public Vertex {
 public:
  static constexpr unsigned numWorkers() { return 6; }
};

// A contiguous run of elements on the tile: a pointer and a size. Trivially copyable: Poplar
// lays a vertex's fields out in memory and never constructs them.
template <typename T, VectorLayout L = VectorLayout::SPAN, unsigned Align = alignof(T),
          bool Interleaved = false>
class Vector {
 public:
  using value_type = T;
  T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return size_; }
  T* data() const { return data_; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
  // Rebinds the view (jax-ipu's glue uses it; codelets need not).
  void reset(T* data, std::size_t size) { data_ = data; size_ = size; }

 private:
  T* data_;
  std::size_t size_;
};

// A list of vectors (rows) of one element type; the rows' views live in the glue's storage.
template <typename T, VectorListLayout L = VectorListLayout::DELTANELEMENTS,
          unsigned Align = alignof(T), bool Interleaved = false>
class VectorList {
 public:
  using value_type = T;
  Vector<T> operator[](std::size_t i) const { return rows_[i]; }
  std::size_t size() const { return count_; }
  void reset(Vector<T>* rows, std::size_t count) { rows_ = rows; count_ = count; }

 private:
  Vector<T>* rows_;
  std::size_t count_;
};

namespace detail {
template <typename T> struct IsVector : std::false_type {};
template <typename T, VectorLayout L, unsigned A, bool I>
struct IsVector<Vector<T, L, A, I>> : std::true_type {};
template <typename T> struct IsVectorList : std::false_type {};
template <typename T, VectorListLayout L, unsigned A, bool I>
struct IsVectorList<VectorList<T, L, A, I>> : std::true_type {};
template <typename T, typename = void> struct Element { using type = T; };
template <typename T> struct Element<T, std::enable_if_t<IsVector<T>::value ||
                                                          IsVectorList<T>::value>> {
  using type = typename T::value_type;
};

// The edge of a field: a scalar on the tile, or a Vector / VectorList view of its memory.
// Access is read-only for Input, read-write for Output and InOut.
template <typename T, bool Writable, bool IsVec = IsVector<T>::value || IsVectorList<T>::value>
class Edge;

template <typename T, bool Writable>
class Edge<T, Writable, false> {
 public:
  using viewed_type = T;
  using element_type = T;
  using ref = std::conditional_t<Writable, T&, const T&>;
  operator ref() const { return *ptr_; }
  ref operator*() const { return *ptr_; }
  template <bool W = Writable, typename = std::enable_if_t<W>>
  Edge& operator=(const T& value) { *ptr_ = value; return *this; }
  void reset(T* data) { ptr_ = data; }

 private:
  T* ptr_;
};

template <typename V, bool Writable>
class Edge<V, Writable, true> {
 public:
  using viewed_type = V;
  using element_type = typename V::value_type;
  using elem = std::conditional_t<Writable, element_type, const element_type>;
  decltype(auto) operator[](std::size_t i) const {
    if constexpr (IsVector<V>::value) {
      return static_cast<elem&>(view_[i]);
    } else {
      return view_[i];
    }
  }
  std::size_t size() const { return view_.size(); }
  template <typename W = V, typename = std::enable_if_t<IsVector<W>::value>>
  elem* data() const { return view_.data(); }
  template <typename W = V, typename = std::enable_if_t<IsVector<W>::value>>
  elem* begin() const { return view_.begin(); }
  template <typename W = V, typename = std::enable_if_t<IsVector<W>::value>>
  elem* end() const { return view_.end(); }
  V& view() { return view_; }

 private:
  V view_;
};
}  // namespace detail

template <typename T> class Input : public detail::Edge<T, false> {};
template <typename T> class Output : public detail::Edge<T, true> {
 public:
  using detail::Edge<T, true>::operator=;
};
template <typename T> class InOut : public detail::Edge<T, true> {
 public:
  using detail::Edge<T, true>::operator=;
};

}  // namespace poplar

// ---- binding fields to tile memory (used by jax-ipu's generated glue) -------------------------
namespace jax_ipu {

// Row views (VectorList, Vector<Input<Vector<T>>>) of one tile's vertex, while it runs.
struct Storage {
  std::vector<std::shared_ptr<void>> held;
  template <typename T> T* array(std::size_t n) {
    auto rows = std::shared_ptr<T>(new T[n > 0 ? n : 1](), std::default_delete<T[]>());
    held.push_back(rows);
    return rows.get();
  }
};

template <typename T> struct IsEdge : std::false_type {};
template <typename T> struct IsEdge<poplar::Input<T>> : std::true_type {};
template <typename T> struct IsEdge<poplar::Output<T>> : std::true_type {};
template <typename T> struct IsEdge<poplar::InOut<T>> : std::true_type {};

template <typename F, typename = void> struct Binder;

template <typename Element, typename Expected>
constexpr void check_element() {
  static_assert(std::is_same_v<std::remove_cv_t<Element>, Expected>,
                "jax_ipu: this vertex field's element type differs from the dtype its array has "
                "in the vertex declaration");
}

// Input/Output/InOut of a scalar, Vector or VectorList.
template <typename F>
struct Binder<F, std::enable_if_t<IsEdge<F>::value>> {
  using Viewed = typename F::viewed_type;
  template <typename Expected>
  static void bind(F& field, void* data, std::size_t size, std::size_t row, Storage& storage) {
    check_element<typename poplar::detail::Element<Viewed>::type, Expected>();
    auto* first = static_cast<Expected*>(data);
    if constexpr (poplar::detail::IsVector<Viewed>::value) {
      field.view().reset(first, size);
    } else if constexpr (poplar::detail::IsVectorList<Viewed>::value) {
      std::size_t rows = row ? size / row : 0;
      auto* views = storage.array<poplar::Vector<Expected>>(rows);
      for (std::size_t r = 0; r < rows; ++r) views[r].reset(first + r * row, row);
      field.view().reset(views, rows);
    } else {
      field.reset(first);
    }
  }
};

// Vector<Input<Vector<T>>>: one field per row of the tile's 2-D data; Vector<T> of plain
// elements: an array-valued attribute of the vertex (a constant on the tile).
template <typename F, poplar::VectorLayout L, unsigned A, bool I>
struct Binder<poplar::Vector<F, L, A, I>> {
  template <typename Expected>
  static void bind(poplar::Vector<F, L, A, I>& field, void* data, std::size_t size,
                   std::size_t row, Storage& storage) {
    if constexpr (IsEdge<F>::value) {
      std::size_t rows = row ? size / row : 0;
      auto* fields = storage.array<F>(rows);
      auto* first = static_cast<Expected*>(data);
      for (std::size_t r = 0; r < rows; ++r) {
        Binder<F>::template bind<Expected>(fields[r], first + r * row, row, row, storage);
      }
      field.reset(fields, rows);
    } else {
      check_element<F, Expected>();
      field.reset(static_cast<F*>(data), size);
    }
  }
};

template <typename Expected, typename F>
void bind(F& field, void* data, std::size_t size, std::size_t row, Storage& storage) {
  Binder<std::remove_cv_t<F>>::template bind<Expected>(const_cast<std::remove_cv_t<F>&>(field),
                                                       data, size, row, storage);
}

// A scalar attribute, `const` fields included: Poplar writes a vertex's state into tile memory
// and never runs a constructor, so a const field is as writable as any other before compute().
template <typename F, typename V>
void set_attribute(F& field, V value) {
  using Plain = std::remove_cv_t<F>;
  static_assert(std::is_arithmetic_v<Plain> || std::is_same_v<Plain, half>,
                "jax_ipu: a scalar attribute must set a scalar field");
  const Plain converted = static_cast<Plain>(value);
  std::memcpy(const_cast<Plain*>(&field), &converted, sizeof(Plain));
}

// The memory of one vertex: zeroed and never constructed, as on the chip, so a codelet's
// declared-but-undefined constructor is never needed.
template <typename V>
class State {
 public:
  static_assert(!std::is_polymorphic_v<V>,
                "jax_ipu: a vertex class cannot have virtual functions (Poplar lays a vertex "
                "out in tile memory and never constructs it)");
  State() { std::memset(bytes_, 0, sizeof(bytes_)); }
  V& vertex() { return *std::launder(reinterpret_cast<V*>(bytes_)); }

 private:
  alignas(V) unsigned char bytes_[sizeof(V)];
};

// How a vertex's run ended.
struct Outcome {
  enum Code { kOk, kFalse, kThrew, kTimeout, kRuntime } code = kOk;
  std::string detail;  // the exception's text, the workers concerned
};

template <typename V, typename = void> struct HasWorkerCompute : std::false_type {};
template <typename V>
struct HasWorkerCompute<V, std::void_t<decltype(std::declval<V&>().compute(0u))>>
    : std::true_type {};

template <typename V>
void worker_task(void* vertex, unsigned worker, JaxIpuWorkerReport* report) {
  try {
    bool ok = static_cast<V*>(vertex)->compute(worker);
    report->state = ok ? JAX_IPU_WORKER_TRUE : JAX_IPU_WORKER_FALSE;
  } catch (const std::exception& e) {
    report->state = JAX_IPU_WORKER_THREW;
    std::snprintf(report->message, sizeof(report->message), "%s", e.what());
  } catch (...) {
    report->state = JAX_IPU_WORKER_THREW;
    report->message[0] = '\0';
  }
}

inline std::string worker_list(const JaxIpuWorkerReport* reports, unsigned n, int state) {
  std::string out;
  for (unsigned w = 0; w < n; ++w) {
    if (reports[w].state != state) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(w);
  }
  return out;
}

// compute() of a Vertex on this thread, or compute(workerId) of a MultiVertex on all its
// workers at once, waiting at most timeout_ms for them.
template <typename V>
Outcome run(V& vertex, std::int64_t timeout_ms) {
  Outcome outcome;
  if constexpr (HasWorkerCompute<V>::value) {
    constexpr unsigned n = poplar::MultiVertex::numWorkers();
    JaxIpuWorkerReport reports[n];
    char message[256] = {0};
    if (jax_ipu_run_workers(n, &worker_task<V>, &vertex, reports, timeout_ms, message,
                            sizeof(message)) != 0) {
      return {Outcome::kRuntime, message};
    }
    std::string stopped = worker_list(reports, n, JAX_IPU_WORKER_STOPPED);
    if (!stopped.empty()) return {Outcome::kTimeout, "worker(s) " + stopped};
    for (unsigned w = 0; w < n; ++w) {
      if (reports[w].state == JAX_IPU_WORKER_THREW) {
        return {Outcome::kThrew, "worker " + std::to_string(w) + ": " + reports[w].message};
      }
    }
    std::string failed = worker_list(reports, n, JAX_IPU_WORKER_FALSE);
    if (!failed.empty()) return {Outcome::kFalse, "worker(s) " + failed};
  } else {
    try {
      if (!vertex.compute()) outcome.code = Outcome::kFalse;
    } catch (const std::exception& e) {
      return {Outcome::kThrew, e.what()};
    } catch (...) {
      return {Outcome::kThrew, ""};
    }
  }
  return outcome;
}

}  // namespace jax_ipu

#endif  // JAX_IPU_POPLAR_VERTEX_HPP
