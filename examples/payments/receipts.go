package main

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/redisfx/redisfx/streamfx"
)

// Receipts consumes payment.created in the same process: the kind of work
// a payments service moves off the request path (e-mailing a receipt).
type Receipts struct {
	log  *zap.Logger
	sent atomic.Int64
}

// NewReceipts is the consumer's constructor.
func NewReceipts(log *zap.Logger) *Receipts { return &Receipts{log: log.Named("receipts")} }

// Handler binds Send to the payment.created stream.
func (r *Receipts) Handler() streamfx.StreamHandler {
	return streamfx.StreamHandler{Stream: paymentCreated, Handler: r.Send}
}

// Send "sends" the receipt of one payment.
func (r *Receipts) Send(_ context.Context, m streamfx.Message) error {
	var p Payment
	if err := json.Unmarshal(m.Data, &p); err != nil {
		return err // malformed: retried, then dead-lettered
	}
	r.sent.Add(1)
	r.log.Info("receipt sent", zap.String("payment", p.ID), zap.Int64("amount", p.Amount), zap.String("currency", p.Currency), zap.Int("attempt", m.Attempt))
	return nil
}
