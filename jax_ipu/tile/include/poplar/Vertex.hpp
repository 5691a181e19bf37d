// jax-ipu's own host implementation of the Poplar vertex API that codelets are written against:
// poplar::Vertex, Input/Output/InOut fields of scalars, Vector and VectorList, VectorLayout.
// Written for jax_ipu.tile (no Graphcore code): a codelet compiled with it runs on the host, one
// vertex object per tile, inside the XLA:CPU program of the IPU Model.
#ifndef JAX_IPU_POPLAR_VERTEX_HPP
#define JAX_IPU_POPLAR_VERTEX_HPP

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include <poplar/HalfFloat.hpp>

namespace poplar {

// Memory layouts of vector fields. On the chip they choose how a field's pointer and size are
// encoded; on the host every layout is a plain pointer and a size.
enum class VectorLayout { ONE_PTR, SPAN, SCALED_PTR32, SCALED_PTR64, SCALED_PTR128,
                          COMPACT_PTR, COMPACT_DELTAN, DELTAN };
enum class VectorListLayout { DELTAN, DELTANELEMENTS, COMPACT_DELTAN, COMPACT_DELTANELEMENTS,
                              ONE_PTR };

// A vertex runs its compute() once on its tile; a MultiVertex runs compute(workerId) on each of
// the tile's worker threads.
class Vertex {};
class SupervisorVertex : public Vertex {};
class MultiVertex : public Vertex {
 public:
  static constexpr unsigned numWorkers() { return 6; }
};

// A contiguous run of elements on the tile: a pointer and a size.
template <typename T, VectorLayout L = VectorLayout::SPAN, unsigned Align = alignof(T),
          bool Interleaved = false>
class Vector {
 public:
  using value_type = T;
  Vector() = default;
  Vector(T* data, std::size_t size) : data_(data), size_(size) {}
  T& operator[](std::size_t i) const { return data_[i]; }
  std::size_t size() const { return size_; }
  T* data() const { return data_; }
  T* begin() const { return data_; }
  T* end() const { return data_ + size_; }
  // Rebinds the view (jax-ipu's glue uses it; codelets need not).
  void reset(T* data, std::size_t size) { data_ = data; size_ = size; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// A list of vectors (rows) of one element type.
template <typename T, VectorListLayout L = VectorListLayout::DELTANELEMENTS,
          unsigned Align = alignof(T), bool Interleaved = false>
class VectorList {
 public:
  using value_type = T;
  Vector<T> operator[](std::size_t i) const { return Vector<T>(rows_[i].data(), rows_[i].size()); }
  std::size_t size() const { return rows_.size(); }
  void reset(T* data, std::size_t rows, std::size_t row_size) {
    rows_.assign(rows, Vector<T>());
    for (std::size_t r = 0; r < rows; ++r) rows_[r].reset(data + r * row_size, row_size);
  }

 private:
  std::vector<Vector<T>> rows_;
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
  using element_type = T;
  using ref = std::conditional_t<Writable, T&, const T&>;
  operator ref() const { return *ptr_; }
  ref operator*() const { return *ptr_; }
  template <bool W = Writable, typename = std::enable_if_t<W>>
  Edge& operator=(const T& value) { *ptr_ = value; return *this; }
  void reset(T* data, std::size_t, std::size_t) { ptr_ = data; }

 private:
  T* ptr_ = nullptr;
};

template <typename V, bool Writable>
class Edge<V, Writable, true> {
 public:
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
  void reset(element_type* data, std::size_t size, std::size_t row_size) {
    if constexpr (IsVector<V>::value) {
      view_.reset(data, size);
    } else {
      view_.reset(data, row_size ? size / row_size : 0, row_size);
    }
  }

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

// Keeps nested views (Vector<Input<Vector<T>>> rows) alive while one tile's vertex runs.
struct Storage {
  std::vector<std::shared_ptr<void>> held;
};

template <typename F> struct Binder;

// Input/Output/InOut of a scalar, Vector or VectorList.
template <template <typename> class Field, typename T>
struct FieldBinder {
  using Element = typename poplar::detail::Element<T>::type;
  template <typename Expected>
  static void bind(Field<T>& field, void* data, std::size_t size, std::size_t row_size,
                   Storage&) {
    static_assert(std::is_same_v<std::remove_cv_t<Element>, Expected>,
                  "jax_ipu: this vertex field's element type differs from the dtype its "
                  "array has in the vertex declaration");
    field.reset(static_cast<Element*>(data), size, row_size);
  }
};
template <typename T> struct Binder<poplar::Input<T>> : FieldBinder<poplar::Input, T> {};
template <typename T> struct Binder<poplar::Output<T>> : FieldBinder<poplar::Output, T> {};
template <typename T> struct Binder<poplar::InOut<T>> : FieldBinder<poplar::InOut, T> {};

// Vector<Input<Vector<T>>>: one field per row of the tile's 2-D data.
template <typename F, poplar::VectorLayout L, unsigned A, bool I>
struct Binder<poplar::Vector<F, L, A, I>> {
  template <typename Expected>
  static void bind(poplar::Vector<F, L, A, I>& field, void* data, std::size_t size,
                   std::size_t row_size, Storage& storage) {
    std::size_t rows = row_size ? size / row_size : 0;
    auto fields = std::make_shared<std::vector<F>>(rows);
    auto* bytes = static_cast<unsigned char*>(data);
    for (std::size_t r = 0; r < rows; ++r) {
      Binder<F>::template bind<Expected>((*fields)[r], bytes + r * row_size * sizeof(Expected),
                                         row_size, row_size, storage);
    }
    field.reset(fields->data(), rows);
    storage.held.push_back(fields);
  }
};

template <typename Expected, typename F>
void bind(F& field, void* data, std::size_t size, std::size_t row_size, Storage& storage) {
  Binder<F>::template bind<Expected>(field, data, size, row_size, storage);
}

// compute() of a Vertex, or compute(workerId) on every worker of a MultiVertex.
template <typename V, typename = void> struct HasWorkerCompute : std::false_type {};
template <typename V>
struct HasWorkerCompute<V, std::void_t<decltype(std::declval<V&>().compute(0u))>>
    : std::true_type {};

template <typename V>
bool run(V& vertex) {
  if constexpr (HasWorkerCompute<V>::value) {
    bool ok = true;
    for (unsigned w = 0; w < poplar::MultiVertex::numWorkers(); ++w) ok = vertex.compute(w) && ok;
    return ok;
  } else {
    return vertex.compute();
  }
}

}  // namespace jax_ipu

#endif  // JAX_IPU_POPLAR_VERTEX_HPP
