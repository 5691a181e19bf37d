// The remote server's gRPC transport in C++ (gRPC's async generic service): every message is
// read and written by gRPC's C++ core, and Python is called once a message, on the same thread.
//
// Why: grpcio's Python server costs about 85 us of CPU per message operation, and a call plus
// read-back is some 14 of them (ipu/docs/remote.md). Here a message costs what gRPC's C++ core
// costs, plus one GIL acquisition for the service's Python handler.
//
// One thread serves the completion queue. With several, gRPC hands its poller role to another
// thread after every event (a futex wake and a switch each time): measured on a call plus
// read-back, 0.61-0.66 ms of server CPU with 24 threads, 0.42-0.43 ms with one. So the thread
// must never wait: a session request that may (for a host buffer on its way, a value being
// computed, the compiler) is deferred by its Python handler, which answers it later from a
// thread of its own through a Reply; the stream reads its next request only after that answer,
// so a session's requests stay in order.
//
// The Python side (jax_ipu/remote/native_transport.py) hands start() a service object whose
// methods answer calls; each returns (code, message, payload): code 0 and the payload, or a gRPC
// status code and its message. Calls are told apart by method: IfrtSession (a stream of
// requests, one answer each), HostBufferStore (chunks copied here into one bytearray),
// HostBufferLookup (a buffer framed here into messages of `chunk` bytes), and every other method
// (one request, one answer).
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr const char kPrefix[] = "/xla.ifrt.proxy.GrpcIfrtService/";
constexpr int kAccepting = 8;  // calls waiting to be accepted at any time

class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

// A session handler's code for "answered later": its payload is submit(reply), which hands the
// request to a thread that calls reply((code, message, payload)) once.
constexpr long kDeferred = -1;

// What a Python handler answered: a status, and its payload (a new reference) when OK or
// deferred.
struct Answer {
  grpc::Status status;
  PyObject* payload = nullptr;
  bool deferred = false;
};

std::string PythonErrorText() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  std::string text = "jax-ipu server internal error in its transport";
  if (value != nullptr) {
    PyObject* str = PyObject_Str(value);
    if (str != nullptr) {
      const char* utf8 = PyUnicode_AsUTF8(str);
      if (utf8 != nullptr) text += std::string(": ") + utf8;
      Py_DECREF(str);
    }
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return text;
}

// Unpacks a handler's (code, message, payload); the GIL is held. Steals `result`.
Answer Unpack(PyObject* result) {
  Answer answer;
  if (result == nullptr) {
    answer.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
    return answer;
  }
  long code = -1;
  PyObject* message = nullptr;
  PyObject* payload = nullptr;
  if (!PyArg_ParseTuple(result, "lOO", &code, &message, &payload)) {
    answer.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
  } else if (code == 0 || code == kDeferred) {
    Py_INCREF(payload);
    answer.payload = payload;
    answer.deferred = code == kDeferred;
  } else {
    const char* text = PyUnicode_Check(message) ? PyUnicode_AsUTF8(message) : nullptr;
    if (text == nullptr) PyErr_Clear();
    answer.status = grpc::Status(static_cast<grpc::StatusCode>(code), text ? text : "error");
  }
  Py_DECREF(result);
  return answer;
}

PyObject* Bytes(const grpc::ByteBuffer& buffer) {
  grpc::Slice slice;
  if (!buffer.TrySingleSlice(&slice).ok()) {
    if (!buffer.DumpToSingleSlice(&slice).ok()) return PyBytes_FromStringAndSize("", 0);
  }
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(slice.begin()),
                                   static_cast<Py_ssize_t>(slice.size()));
}

grpc::ByteBuffer Buffer(const char* data, size_t size) {
  grpc::Slice slice(data, size);
  return grpc::ByteBuffer(&slice, 1);
}

// A protobuf varint at `p` (before `end`); false when it runs off the end or past 64 bits.
bool Varint(const uint8_t*& p, const uint8_t* end, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    uint8_t byte = *p++;
    *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;
}

class Transport;

class Call {
 public:
  explicit Call(Transport* transport);
  ~Call();

  // A deferred session or unary request's answer (from its Reply; the GIL is held).
  void Deferred(Answer answer);

 private:
  enum class Kind { kUnary, kSession, kStore, kLookup };
  struct Op {
    Call* call;
    void (Call::*step)(bool);
  };
  friend class Transport;

  void Run(Op* op, bool ok);
  void Accepted(bool ok);
  void Done(bool ok);
  void ReadDone(bool ok);
  void WriteDone(bool ok);
  void Finished(bool ok);

  bool StartRead();
  bool StartWrite(grpc::ByteBuffer buffer);
  void StartFinish(const grpc::Status& status, const grpc::ByteBuffer* last);
  void Release();
  PyObject* Metadata();
  void EndSession(const char* reason);
  void UnaryPayload(Answer& answer, std::string* out);
  void SessionPayload(Answer& answer, std::string* out);
  void SendSession(const Answer& answer, const std::string& out);
  void Defer(PyObject* submit);
  void StoreChunk();
  void WriteLookup();

  Transport* transport_;
  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  grpc::ByteBuffer in_;
  std::atomic<int> pending_{0};
  std::atomic<Kind> kind_{Kind::kUnary};
  std::string method_;
  Op accept_{this, &Call::Accepted};
  Op done_{this, &Call::Done};
  Op read_{this, &Call::ReadDone};
  Op write_{this, &Call::WriteDone};
  Op finish_{this, &Call::Finished};

  // kSession: the Python stream object; whether it goes on after the answer being written.
  PyObject* session_ = nullptr;
  bool go_on_ = true;
  std::atomic<bool> ended_{false};
  // kStore: the bytearray being filled, the handler's finish(), bytes so far, what went wrong.
  PyObject* store_ = nullptr;
  PyObject* store_finish_ = nullptr;
  size_t store_size_ = 0;
  size_t filled_ = 0;
  const char* problem_ = nullptr;
  // kLookup: the buffer being sent and how far.
  Py_buffer view_{};
  bool has_view_ = false;
  size_t sent_ = 0;
};

class Transport {
 public:
  PyObject* service = nullptr;
  size_t chunk = 1 << 20;
  grpc::AsyncGenericService generic;
  std::unique_ptr<grpc::ServerCompletionQueue> queue;
  std::unique_ptr<grpc::Server> server;
  std::thread thread;  // the one that serves the queue
  int port = 0;
  // Ops are started only while the queue is open; closing it takes this lock.
  std::mutex issue;
  bool closed = false;
  bool stopped = false;  // stop() called (under the GIL)
  // Deferred requests not answered yet: a Reply holds its call, and so this transport.
  std::mutex deferring;
  std::condition_variable answered;
  int deferred = 0;

  void Deferring() {
    std::lock_guard<std::mutex> lock(deferring);
    ++deferred;
  }

  void Undeferred() {
    std::lock_guard<std::mutex> lock(deferring);
    if (--deferred == 0) answered.notify_all();
  }

  void Loop() {
    // One Python thread state for the thread's life: each message's Gil then reuses it, where
    // a thread without one would make and free a thread state per message.
    PyGILState_STATE python = PyGILState_Ensure();
    PyThreadState* state = PyEval_SaveThread();
    void* tag;
    bool ok;
    while (queue->Next(&tag, &ok)) {
      auto* op = static_cast<Call::Op*>(tag);
      op->call->Run(op, ok);
    }
    PyEval_RestoreThread(state);
    PyGILState_Release(python);
  }

  // A new call to accept; false once the queue is closing.
  bool Accept() {
    std::lock_guard<std::mutex> lock(issue);
    if (closed) return false;
    new Call(this);
    return true;
  }
};

Call::Call(Transport* transport) : transport_(transport), stream_(&context_) {
  // The caller holds transport->issue: the queue is open.
  pending_ = 1;
  context_.AsyncNotifyWhenDone(&done_);
  transport_->generic.RequestCall(&context_, &stream_, transport_->queue.get(),
                                  transport_->queue.get(), &accept_);
}

Call::~Call() {
  if (session_ != nullptr || store_ != nullptr || store_finish_ != nullptr || has_view_) {
    Gil gil;
    if (session_ != nullptr && !ended_.exchange(true)) {
      PyObject* r = PyObject_CallMethod(session_, "end", "s", "the server stopped");
      if (r == nullptr) PyErr_Clear();
      Py_XDECREF(r);
    }
    Py_XDECREF(session_);
    Py_XDECREF(store_);
    Py_XDECREF(store_finish_);
    if (has_view_) PyBuffer_Release(&view_);
  }
}

void Call::Run(Op* op, bool ok) {
  (this->*(op->step))(ok);
  Release();
}

void Call::Release() {
  if (--pending_ == 0) delete this;
}

bool Call::StartRead() {
  std::lock_guard<std::mutex> lock(transport_->issue);
  if (transport_->closed) return false;
  ++pending_;
  stream_.Read(&in_, &read_);
  return true;
}

bool Call::StartWrite(grpc::ByteBuffer buffer) {
  std::lock_guard<std::mutex> lock(transport_->issue);
  if (transport_->closed) return false;
  ++pending_;
  stream_.Write(buffer, &write_);
  return true;
}

// Ends the call with `status`; `last`, when given, is written with it in one operation.
void Call::StartFinish(const grpc::Status& status, const grpc::ByteBuffer* last) {
  std::lock_guard<std::mutex> lock(transport_->issue);
  if (transport_->closed) return;
  ++pending_;
  if (last != nullptr && status.ok()) {
    stream_.WriteAndFinish(*last, grpc::WriteOptions(), status, &finish_);
  } else {
    stream_.Finish(status, &finish_);
  }
}

PyObject* Call::Metadata() {
  PyObject* dict = PyDict_New();
  if (dict == nullptr) return nullptr;
  for (const auto& [key, value] : context_.client_metadata()) {
    PyObject* v = PyBytes_FromStringAndSize(value.data(), static_cast<Py_ssize_t>(value.size()));
    std::string k(key.data(), key.size());
    if (v == nullptr || PyDict_SetItemString(dict, k.c_str(), v) != 0) {
      Py_XDECREF(v);
      Py_DECREF(dict);
      return nullptr;
    }
    Py_DECREF(v);
  }
  return dict;
}

void Call::Accepted(bool ok) {
  if (!ok) return;  // the server is stopping: no call came, and no done tag will
  ++pending_;        // the done tag, now certain to come
  transport_->Accept();
  const std::string& method = context_.method();
  method_ = method.rfind(kPrefix, 0) == 0 ? method.substr(sizeof(kPrefix) - 1) : method;
  if (method_ == "IfrtSession") {
    kind_ = Kind::kSession;
  } else if (method_ == "HostBufferStore") {
    kind_ = Kind::kStore;
  } else if (method_ == "HostBufferLookup") {
    kind_ = Kind::kLookup;
  }
  if (kind_ == Kind::kSession || kind_ == Kind::kStore) {
    Answer answer;
    {
      Gil gil;
      PyObject* metadata = Metadata();
      PyObject* result =
          metadata == nullptr
              ? nullptr
              : PyObject_CallMethod(transport_->service,
                                    kind_ == Kind::kSession ? "session" : "store", "O", metadata);
      Py_XDECREF(metadata);
      answer = Unpack(result);
      if (answer.status.ok() && kind_ == Kind::kStore) {
        // payload: (size, finish); the bytearray is made now, filled without the GIL.
        Py_ssize_t size = -1;
        PyObject* finish = nullptr;
        if (PyArg_ParseTuple(answer.payload, "nO", &size, &finish) && size >= 0) {
          store_ = PyByteArray_FromStringAndSize(nullptr, size);
          store_size_ = static_cast<size_t>(size);
          store_finish_ = finish;
          Py_INCREF(finish);
        }
        if (store_ == nullptr) {
          answer.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
        }
        Py_CLEAR(answer.payload);
      } else if (answer.status.ok()) {
        session_ = answer.payload;
        answer.payload = nullptr;
      }
    }
    if (!answer.status.ok()) {
      StartFinish(answer.status, nullptr);
      return;
    }
  }
  StartRead();
}

void Call::Done(bool) {
  // A cancelled session's handler may be waiting for a host buffer: tell it to stop waiting.
  // session_ is read and written only under the GIL (this tag may come while Accepted runs).
  if (kind_ != Kind::kSession || !context_.IsCancelled()) return;
  Gil gil;
  if (session_ != nullptr && !ended_.load()) {
    PyObject* r = PyObject_CallMethod(session_, "cancelled", nullptr);
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
  }
}

void Call::EndSession(const char* reason) {
  if (ended_.exchange(true)) return;
  Gil gil;
  PyObject* r = PyObject_CallMethod(session_, "end", "s", reason);
  if (r == nullptr) PyErr_Clear();
  Py_XDECREF(r);
}

void Call::ReadDone(bool ok) {
  switch (kind_) {
    case Kind::kSession: {
      if (!ok) {  // the client closed its side, or the call was cancelled
        EndSession("the client ended the stream");
        StartFinish(grpc::Status::OK, nullptr);
        return;
      }
      Answer answer;
      std::string out;
      {
        Gil gil;
        PyObject* data = Bytes(in_);
        answer = Unpack(data == nullptr ? nullptr
                                      : PyObject_CallMethod(session_, "message", "N", data));
        if (answer.deferred) {
          Defer(answer.payload);
          Py_CLEAR(answer.payload);
          return;
        }
        SessionPayload(answer, &out);
      }
      SendSession(answer, out);
      return;
    }
    case Kind::kStore:
      if (ok) {
        StoreChunk();
        StartRead();
        return;
      } else {
        Answer answer;
        {
          Gil gil;
          answer = Unpack(PyObject_CallFunction(store_finish_, "Onz", store_,
                                              static_cast<Py_ssize_t>(filled_), problem_));
          Py_CLEAR(answer.payload);
        }
        grpc::ByteBuffer empty = Buffer("", 0);
        StartFinish(answer.status, &empty);
        return;
      }
    case Kind::kLookup: {
      if (!ok) return;  // cancelled before asking: the done tag ends the call
      Answer answer;
      {
        Gil gil;
        answer = Unpack(PyObject_CallMethod(transport_->service, "lookup", "N", Bytes(in_)));
        if (answer.status.ok()) {
          if (PyObject_GetBuffer(answer.payload, &view_, PyBUF_SIMPLE) == 0) {
            has_view_ = true;
          } else {
            answer.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
          }
          Py_CLEAR(answer.payload);
        }
      }
      if (!answer.status.ok()) {
        StartFinish(answer.status, nullptr);
        return;
      }
      WriteLookup();
      return;
    }
    case Kind::kUnary: {
      if (!ok) return;
      Answer answer;
      std::string out;
      {
        Gil gil;
        answer = Unpack(PyObject_CallMethod(transport_->service, "unary", "sN", method_.c_str(),
                                          Bytes(in_)));
        if (answer.deferred) {  // a host-callback poll: answered when a call comes, or later
          Defer(answer.payload);
          Py_CLEAR(answer.payload);
          return;
        }
        UnaryPayload(answer, &out);
      }
      grpc::ByteBuffer reply = Buffer(out.data(), out.size());
      StartFinish(answer.status, &reply);
      return;
    }
  }
}

// A unary handler's payload, its reply bytes, into `out`; the GIL is held.
void Call::UnaryPayload(Answer& answer, std::string* out) {
  if (!answer.status.ok()) return;
  char* bytes = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(answer.payload, &bytes, &size) == 0) {
    out->assign(bytes, static_cast<size_t>(size));
  } else {
    answer.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
  }
  Py_CLEAR(answer.payload);
}

// A session handler's payload, (reply bytes, go on), into `out` and go_on_; the GIL is held.
void Call::SessionPayload(Answer& answer, std::string* out) {
  if (!answer.status.ok()) return;
  char* bytes = nullptr;
  Py_ssize_t size = 0;
  int go_on = 0;
  PyObject* reply = nullptr;
  if (PyArg_ParseTuple(answer.payload, "Op", &reply, &go_on) &&
      PyBytes_AsStringAndSize(reply, &bytes, &size) == 0) {
    out->assign(bytes, static_cast<size_t>(size));
    go_on_ = go_on != 0;
  } else {
    answer.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
  }
  Py_CLEAR(answer.payload);
}

void Call::SendSession(const Answer& answer, const std::string& out) {
  if (!answer.status.ok()) {
    EndSession(answer.status.error_message().c_str());
    StartFinish(answer.status, nullptr);
    return;
  }
  StartWrite(Buffer(out.data(), out.size()));
}

PyObject* NewReply(Call* call);
void Answered(PyObject* reply, Answer answer);

// Hands a session or unary request to submit(reply); the call lives until the reply. The GIL is held.
void Call::Defer(PyObject* submit) {
  ++pending_;
  transport_->Deferring();
  PyObject* reply = NewReply(this);
  if (reply == nullptr) {
    Answer failed;
    failed.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
    Deferred(std::move(failed));
    return;
  }
  PyObject* r = PyObject_CallFunctionObjArgs(submit, reply, nullptr);
  if (r == nullptr) {
    Answer failed;
    failed.status = grpc::Status(grpc::StatusCode::INTERNAL, PythonErrorText());
    Answered(reply, std::move(failed));
  }
  Py_XDECREF(r);
  Py_DECREF(reply);
}

void Call::Deferred(Answer answer) {
  std::string out;
  if (kind_ == Kind::kUnary) {
    UnaryPayload(answer, &out);
    grpc::ByteBuffer reply = Buffer(out.data(), out.size());
    StartFinish(answer.status, &reply);
  } else {
    SessionPayload(answer, &out);
    SendSession(answer, out);
  }
  Transport* transport = transport_;
  Release();  // before the transport may be shut down: the call belongs to its server
  transport->Undeferred();
}

// ---- Reply: a deferred request's answer, called once from any Python thread ----

struct Reply {
  PyObject_HEAD
  Call* call;  // null once answered
};

PyTypeObject* reply_type = nullptr;

PyObject* NewReply(Call* call) {
  auto* reply = PyObject_New(Reply, reply_type);
  if (reply != nullptr) reply->call = call;
  return reinterpret_cast<PyObject*>(reply);
}

// The first answer given to `reply` goes to its call; later ones are ignored.
void Answered(PyObject* reply, Answer answer) {
  auto* r = reinterpret_cast<Reply*>(reply);
  Call* call = r->call;
  r->call = nullptr;
  if (call != nullptr) {
    call->Deferred(std::move(answer));
  } else {
    Py_CLEAR(answer.payload);
  }
}

PyObject* ReplyCall(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyObject* result;
  if (kwargs != nullptr || !PyArg_ParseTuple(args, "O", &result)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "reply((code, message, payload))");
    return nullptr;
  }
  if (reinterpret_cast<Reply*>(self)->call == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "this request was answered already");
    return nullptr;
  }
  Py_INCREF(result);
  Answer answer = Unpack(result);
  if (answer.deferred) {  // not an answer: the session's handler deferred twice
    Py_CLEAR(answer.payload);
    answer.deferred = false;
    answer.status = grpc::Status(grpc::StatusCode::INTERNAL, "a deferred request deferred again");
  }
  Answered(self, std::move(answer));
  Py_RETURN_NONE;
}

// A reply dropped unanswered (its thread failed before answering) still answers its call.
void ReplyDealloc(PyObject* self) {
  Answer answer;
  answer.status = grpc::Status(grpc::StatusCode::INTERNAL,
                               "jax-ipu server internal error: a request's answer was dropped");
  Answered(self, std::move(answer));
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyType_Slot kReplySlots[] = {
    {Py_tp_call, reinterpret_cast<void*>(ReplyCall)},
    {Py_tp_dealloc, reinterpret_cast<void*>(ReplyDealloc)},
    {Py_tp_doc, const_cast<char*>("reply((code, message, payload)): a deferred request's answer")},
    {0, nullptr},
};

// Made only by the transport (Py_TPFLAGS_DISALLOW_INSTANTIATION: Python >= 3.10).
PyType_Spec kReplySpec = {"jax_ipu.remote._transport.Reply", sizeof(Reply), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, kReplySlots};

// Copies the data fields (number 1) of one GrpcHostBufferStoreRequest into the bytearray.
void Call::StoreChunk() {
  if (problem_ != nullptr) return;
  std::vector<grpc::Slice> slices;
  if (!in_.Dump(&slices).ok() || slices.empty()) {
    problem_ = slices.empty() ? nullptr : "malformed";  // an empty message holds no data
    return;
  }
  char* into = PyByteArray_AS_STRING(store_);
  // The message as jaxlib's client writes it, one data field: its bytes are copied from each
  // slice as it came, without first joining the slices.
  {
    const uint8_t* p = slices[0].begin();
    const uint8_t* end = slices[0].end();
    uint64_t key, length;
    if (Varint(p, end, &key) && key == 0x0A && Varint(p, end, &length)) {
      size_t rest = static_cast<size_t>(end - p);
      for (size_t i = 1; i < slices.size(); ++i) rest += slices[i].size();
      if (length == rest) {
        if (length > store_size_ - filled_) {
          problem_ = "overflow";
          return;
        }
        for (size_t i = 0; i < slices.size(); ++i) {
          const uint8_t* from = i == 0 ? p : slices[i].begin();
          size_t n = static_cast<size_t>(slices[i].end() - from);
          std::memcpy(into + filled_, from, n);
          filled_ += n;
        }
        return;
      }
    }
  }
  grpc::Slice slice;
  if (!in_.DumpToSingleSlice(&slice).ok()) {
    problem_ = "malformed";
    return;
  }
  const uint8_t* p = slice.begin();
  const uint8_t* end = slice.end();
  while (p < end) {
    uint64_t key, length;
    if (!Varint(p, end, &key)) {
      problem_ = "malformed";
      return;
    }
    switch (key & 7) {
      case 0:
        if (!Varint(p, end, &length)) problem_ = "malformed";
        break;
      case 1:
        if (end - p < 8) problem_ = "malformed";
        p += 8;
        break;
      case 5:
        if (end - p < 4) problem_ = "malformed";
        p += 4;
        break;
      case 2:
        if (!Varint(p, end, &length) || length > static_cast<uint64_t>(end - p)) {
          problem_ = "malformed";
          break;
        }
        if ((key >> 3) == 1) {
          if (length > store_size_ - filled_) {
            problem_ = "overflow";
            return;
          }
          std::memcpy(into + filled_, p, length);
          filled_ += length;
        }
        p += length;
        break;
      default:
        problem_ = "malformed";
    }
    if (problem_ != nullptr) return;
  }
}

void Call::WriteLookup() {
  size_t total = static_cast<size_t>(view_.len);
  size_t n = std::min(transport_->chunk, total - sent_);
  // GrpcHostBufferLookupResponse{bytes data = 1}: its key, the length, the bytes.
  uint8_t head[11];
  size_t h = 0;
  head[h++] = 0x0A;
  for (uint64_t v = n;; v >>= 7) {
    head[h++] = static_cast<uint8_t>((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
    if (v <= 0x7F) break;
  }
  grpc::Slice slice(grpc_slice_malloc(h + n), grpc::Slice::STEAL_REF);
  auto* out = const_cast<uint8_t*>(slice.begin());
  std::memcpy(out, head, h);
  std::memcpy(out + h, static_cast<const char*>(view_.buf) + sent_, n);
  if (n == 0) slice = grpc::Slice();  // an empty buffer: one empty message
  sent_ += n;
  grpc::ByteBuffer buffer(&slice, 1);
  if (sent_ >= total) {
    StartFinish(grpc::Status::OK, &buffer);
  } else {
    StartWrite(buffer);
  }
}

void Call::WriteDone(bool ok) {
  if (kind_ == Kind::kLookup) {
    if (ok) {
      WriteLookup();
    } else {
      StartFinish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"), nullptr);
    }
    return;
  }
  // kSession
  if (ok && go_on_) {
    StartRead();
    return;
  }
  EndSession(ok ? "the session ended" : "the client disconnected");
  StartFinish(grpc::Status::OK, nullptr);
}

void Call::Finished(bool) {
  if (has_view_) {
    Gil gil;
    PyBuffer_Release(&view_);
    has_view_ = false;
  }
}

// ---- the module ----

const char kCapsule[] = "jax_ipu.remote._transport.Transport";

void Shutdown(Transport* t, double grace) {
  auto deadline = std::chrono::system_clock::now() +
                  std::chrono::microseconds(static_cast<int64_t>(grace * 1e6));
  t->server->Shutdown(deadline);
  {
    std::lock_guard<std::mutex> lock(t->issue);
    t->closed = true;
    t->queue->Shutdown();
  }
  if (t->thread.joinable()) t->thread.join();
  {  // a deferred request's thread may still be at work: its answer goes nowhere now
    std::unique_lock<std::mutex> lock(t->deferring);
    t->answered.wait(lock, [t] { return t->deferred == 0; });
  }
  t->server.reset();
}

// A transport's capsule gone: freed if stopped; one still serving (the interpreter exiting
// without stop()) is left to the process's exit, since its threads may still run.
void Release(PyObject* capsule) {
  auto* t = static_cast<Transport*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (t != nullptr && t->stopped) {
    Py_CLEAR(t->service);
    delete t;
  }
}

PyObject* Start(PyObject*, PyObject* args) {
  PyObject* service;
  const char* address;
  Py_ssize_t chunk;
  if (!PyArg_ParseTuple(args, "Osn", &service, &address, &chunk)) return nullptr;
  if (chunk < 1) {
    PyErr_SetString(PyExc_ValueError, "chunk must be positive");
    return nullptr;
  }
  auto* t = new Transport();
  t->service = service;
  Py_INCREF(service);
  t->chunk = static_cast<size_t>(chunk);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &t->port);
  builder.RegisterAsyncGenericService(&t->generic);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  t->queue = builder.AddCompletionQueue();
  Py_BEGIN_ALLOW_THREADS;
  t->server = builder.BuildAndStart();
  Py_END_ALLOW_THREADS;
  if (!t->server || t->port == 0) {
    if (t->server) t->server->Shutdown();
    t->queue->Shutdown();
    void* tag;
    bool ok;
    while (t->queue->Next(&tag, &ok)) {
    }
    Py_DECREF(service);
    t->service = nullptr;
    delete t;
    PyErr_Format(PyExc_OSError, "cannot bind %s (in use?)", address);
    return nullptr;
  }
  for (int i = 0; i < kAccepting; ++i) t->Accept();
  t->thread = std::thread([t] { t->Loop(); });
  PyObject* capsule = PyCapsule_New(t, kCapsule, Release);
  if (capsule == nullptr) {
    Py_BEGIN_ALLOW_THREADS;  // no Python object holds it: stop it here
    Shutdown(t, 0);
    Py_END_ALLOW_THREADS;
    Py_CLEAR(t->service);
    delete t;
  }
  return capsule;
}

PyObject* Port(PyObject*, PyObject* args) {
  PyObject* capsule;
  if (!PyArg_ParseTuple(args, "O", &capsule)) return nullptr;
  auto* t = static_cast<Transport*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (t == nullptr) return nullptr;
  return PyLong_FromLong(t->port);
}

// Stops: calls still open after `grace` seconds are cancelled; every thread is joined.
PyObject* Stop(PyObject*, PyObject* args) {
  PyObject* capsule;
  double grace;
  if (!PyArg_ParseTuple(args, "Od", &capsule, &grace)) return nullptr;
  auto* t = static_cast<Transport*>(PyCapsule_GetPointer(capsule, kCapsule));
  if (t == nullptr) return nullptr;
  if (!t->stopped) {
    t->stopped = true;
    Py_BEGIN_ALLOW_THREADS;
    Shutdown(t, grace);
    Py_END_ALLOW_THREADS;
  }
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"start", Start, METH_VARARGS,
     "start(service, address, chunk) -> transport: serve `address`"},
    {"port", Port, METH_VARARGS, "port(transport) -> the port bound"},
    {"stop", Stop, METH_VARARGS, "stop(transport, grace): cancel what is open after grace s"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_transport",
                       "The remote server's gRPC transport in C++.", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__transport() {
  if (reply_type == nullptr) {
    reply_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kReplySpec));
    if (reply_type == nullptr) return nullptr;
  }
  return PyModule_Create(&kModule);
}
