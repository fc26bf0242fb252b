package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/redisfx/redisfx/cachefx"
	"github.com/redisfx/redisfx/httpfx"
	"github.com/redisfx/redisfx/idempotencyfx"
	"github.com/redisfx/redisfx/lockfx"
	"github.com/redisfx/redisfx/ratelimitfx"
	"github.com/redisfx/redisfx/streamfx"
	"github.com/redisfx/redisfx/tracingfx"
)

// Test cards of the simulated processor.
const (
	cardDeclined       = "4000000000000002"
	cardProcessorError = "4000000000000119"
)

// Payment is what the API returns.
type Payment struct {
	ID       string `json:"id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Status   string `json:"status"` // succeeded, declined, failed, invalid
}

// errProcessor is the simulated processor's outage: the handler returns it,
// so the payment is a failed idempotency record and the client gets 500.
var errProcessor = errors.New("payment processor unavailable")

// PaymentService charges cards and remembers every attempt it executed.
type PaymentService struct {
	tracer  tracingfx.ITracingService
	delay   time.Duration
	cache   *cachefx.Cache       // GET /payments/{id} reads through it
	locks   *lockfx.Locker       // one charge per card at a time, with PAYMENTS_CARD_LOCK=on
	events  *streamfx.Streams    // payment.created
	limiter *ratelimitfx.Limiter // POST /payments, when RATE_LIMIT is set
	limit   *ratelimitfx.Rule    // nil: no rate limit
	log     *zap.Logger
	// failOpen: charge without the card lock when Redis cannot give it
	// (IDEMPOTENCY_ERROR_POLICY=fail-open).
	failOpen bool
	cardLock bool

	mu       sync.Mutex
	attempts []Payment
	byID     map[string]int
}

// PaymentServiceParams injects the tracer by its name, TRACING_SERVICE,
// and the plugins the service uses.
type PaymentServiceParams struct {
	fx.In
	Tracer  tracingfx.ITracingService `name:"TRACING_SERVICE"`
	Env     Env
	Cache   *cachefx.Cache
	Locks   *lockfx.Locker
	Events  *streamfx.Streams
	Limiter *ratelimitfx.Limiter
	Log     *zap.Logger
}

// NewPaymentService is the service's constructor.
func NewPaymentService(p PaymentServiceParams) *PaymentService {
	s := &PaymentService{tracer: p.Tracer, delay: p.Env.PaymentsDelay, cache: p.Cache.Namespace("payments"), locks: p.Locks,
		events: p.Events, limiter: p.Limiter, log: p.Log, byID: map[string]int{},
		failOpen: p.Env.ErrorPolicy == idempotencyfx.FailOpen, cardLock: p.Env.CardLock}
	if p.Env.RateLimit > 0 {
		s.limit = &ratelimitfx.Rule{Name: "payments", Limit: p.Env.RateLimit, Window: p.Env.RateLimitWindow}
	}
	return s
}

// record appends one executed attempt.
func (s *PaymentService) record(p Payment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byID[p.ID] = len(s.attempts)
	s.attempts = append(s.attempts, p)
}

// charge runs the simulated processor inside a custom span.
func (s *PaymentService) charge(ctx context.Context, p *Payment, card string) error {
	return s.tracer.WithSpan(ctx, "payment.charge", func(ctx context.Context) error {
		s.tracer.SetAttribute(ctx, "payment.id", p.ID)
		s.tracer.SetAttribute(ctx, "payment.amount", p.Amount)
		s.tracer.SetAttribute(ctx, "payment.currency", p.Currency)
		switch card {
		case cardDeclined:
			p.Status = "declined"
			s.tracer.AddEvent(ctx, "payment.declined", nil)
		case cardProcessorError:
			p.Status = "failed"
			return errProcessor
		default:
			p.Status = "succeeded"
		}
		return nil
	}, tracingfx.ISpanOptions{Kind: tracingfx.KindInternal})
}

type createRequest struct {
	Amount   json.RawMessage `json:"amount"`
	Currency string          `json:"currency"`
	Card     string          `json:"card"`
}

// Create is POST /payments. Every execution waits PAYMENTS_DELAY and
// appends one attempt, whatever the outcome.
//
// The body is read first, up to its limit: the server's ReadTimeout bounds
// reading the request from its start, so a body read after PAYMENTS_DELAY
// (one that did not arrive with the headers, on a request without a key,
// which the idempotency layer has not read) would fail as invalid.
func (s *PaymentService) Create(w http.ResponseWriter, r *http.Request) error {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxPaymentBody))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
	if s.delay > 0 {
		time.Sleep(s.delay) // the simulated processor does not stop for a client that left
	}
	p := Payment{ID: newID()}
	var req createRequest
	amount, problem := parse(r, &req)
	if problem != "" {
		p.Status = "invalid"
		s.record(p)
		return &httpfx.ProblemError{Problem: httpfx.NewProblem(http.StatusBadRequest, "invalid_request", problem)}
	}
	p.Amount, p.Currency = amount, req.Currency
	// The charge, its card lock and its announcement go on if the client
	// leaves (each is bounded by its own timeout): a payment whose client
	// timed out is still the payment its retry must be replayed.
	ctx := context.WithoutCancel(r.Context())
	err = s.chargeUnderCardLock(ctx, &p, req.Card)
	if err != nil && p.Status == "" {
		p.Status = "failed" // the charge did not run
	}
	s.record(p)
	if err != nil {
		return err
	}
	if p.Status == "succeeded" {
		s.announceCreated(ctx, p)
	}
	status := http.StatusCreated
	if p.Status == "declined" {
		status = http.StatusPaymentRequired
	} else {
		w.Header().Set("Location", "/payments/"+p.ID)
	}
	writeJSON(w, status, p)
	return nil
}

// errReader ends a body read ahead with the error its read ended with
// (io.EOF when it was read whole).
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err == nil {
		return 0, io.EOF
	}
	return 0, e.err
}

// parse validates the body and says what is wrong.
// maxPaymentBody is the largest payment body the handler reads.
const maxPaymentBody = 64 << 10

func parse(r *http.Request, req *createRequest) (int64, string) {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxPaymentBody))
	err := dec.Decode(req)
	if err == nil {
		// One object and nothing after it but white space: `{…} junk` is not a payment.
		// The reader's own error (the size limit reached in trailing white
		// space) stays the error: it says what is wrong.
		if _, end := dec.Token(); end != io.EOF {
			err = end
			if end == nil {
				err = errors.New("data after the JSON object")
			}
		}
	}
	if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
		return 0, "the body is larger than 64 KiB"
	}
	if err != nil {
		return 0, "the body must be a JSON object: {\"amount\": <int>, \"currency\": \"<3 letters>\", \"card\": \"<digits>\"} and nothing after it"
	}
	var amount int64
	if err := json.Unmarshal(req.Amount, &amount); err != nil || amount <= 0 {
		return 0, "amount must be a positive integer in minor units"
	}
	if len(req.Currency) != 3 || !letters(req.Currency) {
		return 0, "currency must be 3 letters (ISO 4217)"
	}
	if req.Card == "" || len(req.Card) > 19 || !digits(req.Card) {
		return 0, "card must be 1 to 19 digits"
	}
	return amount, ""
}

func letters(s string) bool {
	for _, c := range s {
		if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// List is GET /payments: every attempt, oldest first.
func (s *PaymentService) List(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := append([]Payment{}, s.attempts...)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// errCardBusy: the card's lock stayed held (another process is charging
// it) for PAYMENTS_LOCK_WAIT.
var errCardBusy = &httpfx.ProblemError{Problem: httpfx.Problem{
	Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable), Status: http.StatusServiceUnavailable,
	Code: "card_busy", Detail: "Another payment with this card is being processed; retry with a new idempotency key.", RetryAfter: time.Second,
}}

// chargeUnderCardLock charges with the card's lock held: one charge per
// card at a time, across processes, as a real service does around a
// balance check and debit. The simulated processor latency (PAYMENTS_DELAY)
// is spent before, so concurrent payments with one card wait for each
// other only for the charge itself. When Redis cannot give the lock, the
// app's error policy decides, as it does for idempotency: fail-open
// charges without the lock (and says so in the log), fail-closed refuses.
//
// The lock is off by default (PAYMENTS_CARD_LOCK=on turns it on): it
// serialises every payment of one card across all processes, which a load
// test with a single card turns into the bottleneck (measured: 32
// connections, one card, 6.9k → 2.4k payments/s). A real service locks per
// account, where that contention is rare.
func (s *PaymentService) chargeUnderCardLock(ctx context.Context, p *Payment, card string) error {
	if !s.cardLock {
		return s.charge(ctx, p, card)
	}
	lock, err := s.locks.Acquire(ctx, "card:"+card)
	switch {
	case errors.Is(err, lockfx.ErrNotAcquired):
		return errCardBusy
	case err != nil && s.failOpen:
		s.log.Warn("card lock unavailable: charging without it (fail-open)", zap.String("payment", p.ID), zap.Error(err))
		return s.charge(ctx, p, card)
	case err != nil:
		return err
	}
	defer func() { _ = lock.Release(ctx) }()
	return s.charge(ctx, p, card)
}

// errNotFound is GET /payments/{id}'s 404; it is never cached.
var errNotFound = &httpfx.ProblemError{Problem: httpfx.NewProblem(http.StatusNotFound, "payment_not_found", "no payment with this id")}

// Get is GET /payments/{id}, read through the cache: a payment never
// changes once recorded, so a cached copy is never stale.
func (s *PaymentService) Get(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	p, err := cachefx.GetOrLoadJSON(r.Context(), s.cache, id, 10*time.Minute, func(context.Context) (Payment, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		i, ok := s.byID[id]
		if !ok {
			return Payment{}, errNotFound
		}
		return s.attempts[i], nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, p)
	return nil
}

// paymentCreated is the stream the service announces succeeded payments on.
const paymentCreated = "payment.created"

// announceCreated announces a succeeded payment through the idempotency
// outbox: committed with the payment's recorded outcome, it reaches the
// stream exactly once, and never for an execution whose outcome is not
// the recorded one. A request without a key has no record to commit it
// with: it is published at once, and lost if that fails (logged); the
// charge stands either way.
func (s *PaymentService) announceCreated(ctx context.Context, p Payment) {
	data, _ := json.Marshal(p) // strings and numbers
	err := idempotencyfx.Emit(ctx, paymentCreated, data)
	if errors.Is(err, idempotencyfx.ErrNoOutbox) {
		_, err = s.events.Publish(ctx, paymentCreated, data)
	}
	if err != nil {
		s.log.Warn("payment.created not published", zap.String("payment", p.ID), zap.Error(err))
	}
}

// Routes mounts the payments API; POST is idempotent.
func (s *PaymentService) Routes() httpfx.Routes {
	return func(r chi.Router) {
		post := chi.Middlewares{idempotencyfx.Idempotent()}
		if s.limit != nil { // counted before idempotency: replays count too
			post = chi.Middlewares{s.limiter.Limit(*s.limit), idempotencyfx.Idempotent()}
		}
		r.With(post...).Method(http.MethodPost, "/payments", httpfx.HandlerFunc(s.Create))
		r.Get("/payments", s.List)
		r.Method(http.MethodGet, "/payments/{id}", httpfx.HandlerFunc(s.Get))
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "pay_" + hex.EncodeToString(b[:])
}
