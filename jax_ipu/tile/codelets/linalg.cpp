// jax_ipu.tile's linear-algebra codelets: Householder QR and Hessenberg reductions and the
// parallel Jacobi eigensolver, one column (or pair of columns) per tile. Written for jax-ipu in
// the dialect popc compiles: MultiVertex workers that split a column and hand partial sums to
// worker 0, const attribute fields, constructors declared and never defined (Poplar lays a
// vertex out in tile memory and never constructs it), __builtin_assume hints and always_inline
// helpers. Worker ranges come from a `worker_offsets` constant: worker w takes float pairs
// [offsets[w], offsets[w + 1]).
#include <cmath>
#include <cstring>
#include <utility>

#include <poplar/HalfFloat.hpp>
#include <poplar/Vertex.hpp>

using namespace poplar;

static constexpr unsigned kWorkers = MultiVertex::numWorkers();

// Partial sums handed from workers 1..5 to worker 0. A worker stores its value, then raises its
// flag (a release store); worker 0 waits for each flag (acquire loads), reads the value and
// lowers the flag for the next run. It works however the workers are scheduled, because only
// the reader resets a flag; on the chip the atomics are plain loads and stores.
struct Handover {
  float value[kWorkers];
  unsigned ready[kWorkers];
};

// The rotation (c, s) that zeroes the off-diagonal of the symmetric 2x2 block
// [[app, apq], [apq, aqq]] under J^T A J, J = [[c, s], [-s, c]]: the smaller root t of
// t^2 + 2 tau t - 1 = 0, tau = (aqq - app) / (2 apq), taken without dividing by apq.
__attribute__((always_inline)) void symmetric_schur(float app, float aqq, float apq,
                                                    float* c, float* s) {
  const float twice_pq = 2 * apq;
  const float diff = aqq - app;
  if (twice_pq * twice_pq <= 1e-12f * diff * diff) {
    *c = 1;
    *s = 0;
    return;
  }
  const float hyp = std::sqrt(twice_pq * twice_pq + diff * diff);
  const float t = twice_pq / (diff >= 0 ? diff + hyp : diff - hyp);
  *c = 1 / std::sqrt(1 + t * t);
  *s = t * *c;
}

static inline unsigned index_of(const float* prefixed) {
  unsigned bits;
  std::memcpy(&bits, prefixed, sizeof(bits));
  return bits;
}

// Worker `wid`'s share of a Householder correction vector: v = R[col:] (zeros above), its
// squared norm summed by worker 0, which then sets v[col] -= |v| sign and 2 / |v|^2.
static inline bool correction_vector(const float* rcol, const float* sdiag, float* v,
                                     float* vrescale, unsigned size, unsigned col, unsigned wid,
                                     Handover& handover) {
  __builtin_assume(wid < kWorkers);
  float partial = 0;
  for (unsigned i = wid; i < size; i += kWorkers) {
    const float value = i >= col ? rcol[i] : 0.0f;
    v[i] = value;
    partial += value * value;
  }
  if (wid != 0) {
    handover.value[wid] = partial;
    __atomic_store_n(&handover.ready[wid], 1u, __ATOMIC_RELEASE);
    return true;
  }
  float norm2 = partial;
  for (unsigned w = 1; w < kWorkers; ++w) {
    while (__atomic_load_n(&handover.ready[w], __ATOMIC_ACQUIRE) == 0) {
    }
    norm2 += handover.value[w];
    handover.ready[w] = 0;
  }
  const float head = rcol[col];
  const float updated = head - std::sqrt(norm2) * sdiag[col];
  v[col] = updated;
  norm2 += updated * updated - head * head;
  vrescale[0] = 2 / norm2;
  return true;
}

// x[start + i] -= scale * v[i] over worker `wid`'s pairs of v.
static inline void householder_update(float* x, const float* v, float scale, unsigned start,
                                      unsigned begin, unsigned end) {
  for (unsigned i = 2 * begin; i < 2 * end; ++i) x[start + i] -= scale * v[i];
}

// Dot product of x and y: each worker's pair of partial sums in partials[2w], partials[2w+1].
class DotProduct1d : public MultiVertex {
 public:
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> x;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> y;
  Input<Vector<unsigned short, VectorLayout::ONE_PTR>> worker_offsets;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> partials;  // (2 x workers,)

  DotProduct1d();

  bool compute(unsigned wid) {
    __builtin_assume(wid < kWorkers);
    float even = 0, odd = 0;
    for (unsigned i = worker_offsets[wid]; i < worker_offsets[wid + 1]; ++i) {
      even += x[2 * i] * y[2 * i];
      odd += x[2 * i + 1] * y[2 * i + 1];
    }
    partials[2 * wid] = even;
    partials[2 * wid + 1] = odd;
    return true;
  }
};

// QR: the correction vector of column `col_idx` of R (stored as a row of R^T).
class QRCorrectionVector : public MultiVertex {
 public:
  Input<Vector<float, VectorLayout::SPAN, 8>> Rcol;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> sdiag;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> v;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> vrescale;  // (1,): 2 / |v|^2
  const unsigned col_idx;

  static Handover handover;
  QRCorrectionVector();

  bool compute(unsigned wid) {
    return correction_vector(&Rcol[0], &sdiag[0], &v[0], &vrescale[0], Rcol.size(), col_idx, wid,
                             handover);
  }
};
Handover QRCorrectionVector::handover;

// QR: x[start_idx + i] -= scale1 * scale2 * v[i], in place.
class QRHouseholderRowUpdate : public MultiVertex {
 public:
  InOut<Vector<float, VectorLayout::ONE_PTR, 8>> x;
  Input<Vector<float, VectorLayout::SPAN, 8>> v;
  Input<Vector<float, VectorLayout::ONE_PTR>> scale1;
  Input<Vector<float, VectorLayout::ONE_PTR>> scale2;
  Input<Vector<unsigned short, VectorLayout::ONE_PTR>> worker_offsets;
  unsigned short start_idx;

  QRHouseholderRowUpdate();

  bool compute(unsigned wid) {
    householder_update(&x[0], &v[0], scale1[0] * scale2[0], start_idx, worker_offsets[wid],
                       worker_offsets[wid + 1]);
    return true;
  }
};

// Hessenberg: as QR's, the column index read from the tile (it changes every loop trip).
class HessenbergCorrectionVector : public MultiVertex {
 public:
  Input<Vector<float, VectorLayout::SPAN, 8>> Rcol;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> sdiag;
  Input<Vector<int, VectorLayout::ONE_PTR>> cidx;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> v;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> vrescale;

  static Handover handover;
  HessenbergCorrectionVector();

  bool compute(unsigned wid) {
    return correction_vector(&Rcol[0], &sdiag[0], &v[0], &vrescale[0], Rcol.size(),
                             static_cast<unsigned>(cidx[0]), wid, handover);
  }
};
Handover HessenbergCorrectionVector::handover;

class HessenbergHouseholderRowUpdate : public MultiVertex {
 public:
  InOut<Vector<float, VectorLayout::ONE_PTR, 8>> x;
  Input<Vector<float, VectorLayout::SPAN, 8>> v;
  Input<Vector<float, VectorLayout::ONE_PTR>> scale1;
  Input<Vector<float, VectorLayout::ONE_PTR>> scale2;
  Input<Vector<int, VectorLayout::ONE_PTR>> start_idx_;
  Input<Vector<unsigned short, VectorLayout::ONE_PTR>> worker_offsets;

  HessenbergHouseholderRowUpdate();

  bool compute(unsigned wid) {
    householder_update(&x[0], &v[0], scale1[0] * scale2[0],
                       static_cast<unsigned>(start_idx_[0]), worker_offsets[wid],
                       worker_offsets[wid + 1]);
    return true;
  }
};

// Jacobi: (c, s) of the pair (p, q) from its two columns.
class JacobiSymSchur2 : public Vertex {
 public:
  Input<Vector<unsigned, VectorLayout::ONE_PTR, 8>> pq;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> pcol;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> qcol;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> cs;

  JacobiSymSchur2();

  bool compute() {
    symmetric_schur(pcol[pq[0]], qcol[pq[1]], pcol[pq[1]], &cs[0], &cs[1]);
    return true;
  }
};

// Columns carry their index twice (as float bits) ahead of their N values.
static constexpr unsigned kPrefix = 2;

// Jacobi, first step on a tile's pair of columns (p, q): their rotation, A J on both columns,
// and the diagonal 2x2 block of J^T A J. Each worker rotates its rows; the worker holding row p
// (or q) writes that row's block values after its own rotation of it.
class JacobiUpdateFirstStep : public MultiVertex {
 public:
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> pcol;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> qcol;
  Input<Vector<unsigned short, VectorLayout::ONE_PTR>> worker_offsets;
  Output<Vector<unsigned, VectorLayout::ONE_PTR, 8>> rotset_sorted;  // (2,): p < q
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> cs;                // (2,)
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> pcol_updated;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> qcol_updated;

  JacobiUpdateFirstStep();

  bool compute(unsigned wid) {
    unsigned p = index_of(&pcol[0]);
    unsigned q = index_of(&qcol[0]);
    const float* a = &pcol[kPrefix];
    const float* b = &qcol[kPrefix];
    float* a2 = &pcol_updated[kPrefix];
    float* b2 = &qcol_updated[kPrefix];
    if (p > q) {
      std::swap(p, q);
      std::swap(a, b);
      std::swap(a2, b2);
    }
    const float app = a[p], aqq = b[q], apq = a[q];
    float c, s;
    symmetric_schur(app, aqq, apq, &c, &s);
    const unsigned begin = 2 * worker_offsets[wid], end = 2 * worker_offsets[wid + 1];
    for (unsigned i = begin; i < end; ++i) {
      const float ai = a[i], bi = b[i];
      a2[i] = c * ai - s * bi;
      b2[i] = s * ai + c * bi;
    }
    if (begin <= p && p < end) {
      a2[p] = c * c * app - 2 * s * c * apq + s * s * aqq;
      b2[p] = 0;
    }
    if (begin <= q && q < end) {
      b2[q] = s * s * app + 2 * s * c * apq + c * c * aqq;
      a2[q] = 0;
    }
    if (wid == 0) {
      for (unsigned k = 0; k < kPrefix; ++k) {
        pcol_updated[k] = pcol[k];
        qcol_updated[k] = qcol[k];
      }
      rotset_sorted[0] = p;
      rotset_sorted[1] = q;
      cs[0] = c;
      cs[1] = s;
    }
    return true;
  }
};

// Jacobi, second step: rows k, l of the tile's two columns rotated by every other pair's
// (c, s) (J^T A); the tile's own pair, already set by the first step, is the identity (written
// into cs_arr, as the result shows).
class JacobiUpdateSecondStep : public MultiVertex {
 public:
  InOut<Vector<float, VectorLayout::ONE_PTR, 8>> cs_arr;                  // (pairs, 2)
  Input<Vector<unsigned, VectorLayout::ONE_PTR, 8>> rotset_sorted_arr;    // (pairs, 2)
  Input<Vector<unsigned, VectorLayout::ONE_PTR, 8>> rotset_idx_ignored;   // (1,)
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> pcol;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> qcol;
  Input<Vector<unsigned short, VectorLayout::ONE_PTR>> worker_offsets;    // in pairs
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> pcol_updated;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> qcol_updated;

  JacobiUpdateSecondStep();

  bool compute(unsigned wid) {
    const unsigned ignored = rotset_idx_ignored[0];
    const float* cols[2] = {&pcol[kPrefix], &qcol[kPrefix]};
    float* updated[2] = {&pcol_updated[kPrefix], &qcol_updated[kPrefix]};
    for (unsigned j = worker_offsets[wid]; j < worker_offsets[wid + 1]; ++j) {
      if (j == ignored) {
        cs_arr[2 * j] = 1;
        cs_arr[2 * j + 1] = 0;
      }
      const float c = cs_arr[2 * j], s = cs_arr[2 * j + 1];
      const unsigned k = rotset_sorted_arr[2 * j], l = rotset_sorted_arr[2 * j + 1];
      for (unsigned col = 0; col < 2; ++col) {
        const float xk = cols[col][k], xl = cols[col][l];
        updated[col][k] = c * xk - s * xl;
        updated[col][l] = s * xk + c * xl;
      }
    }
    if (wid == 0) {
      for (unsigned k = 0; k < kPrefix; ++k) {
        pcol_updated[k] = pcol[k];
        qcol_updated[k] = qcol[k];
      }
    }
    return true;
  }
};

// Jacobi: the eigenvectors' pair of columns rotated by the pair's (c, s) (V J).
class JacobiUpdateEigenvectors : public MultiVertex {
 public:
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> cs;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> vpcol;
  Input<Vector<float, VectorLayout::ONE_PTR, 8>> vqcol;
  Input<Vector<unsigned short, VectorLayout::ONE_PTR>> worker_offsets;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> vpcol_out;
  Output<Vector<float, VectorLayout::ONE_PTR, 8>> vqcol_out;

  JacobiUpdateEigenvectors();

  bool compute(unsigned wid) {
    const bool swapped = index_of(&vpcol[0]) > index_of(&vqcol[0]);
    const float* a = swapped ? &vqcol[kPrefix] : &vpcol[kPrefix];
    const float* b = swapped ? &vpcol[kPrefix] : &vqcol[kPrefix];
    float* a2 = swapped ? &vqcol_out[kPrefix] : &vpcol_out[kPrefix];
    float* b2 = swapped ? &vpcol_out[kPrefix] : &vqcol_out[kPrefix];
    const float c = cs[0], s = cs[1];
    for (unsigned i = 2 * worker_offsets[wid]; i < 2 * worker_offsets[wid + 1]; ++i) {
      const float ai = a[i], bi = b[i];
      a2[i] = c * ai - s * bi;
      b2[i] = s * ai + c * bi;
    }
    if (wid == 0) {
      for (unsigned k = 0; k < kPrefix; ++k) {
        vpcol_out[k] = vpcol[k];
        vqcol_out[k] = vqcol[k];
      }
    }
    return true;
  }
};
