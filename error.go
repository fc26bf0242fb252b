package redisfx

// BaseError is the common base of every error the redisfx modules define. It is a
// plain error, not an HTTP error: HTTP statuses are chosen by error filters
// (see httpfx), so the same error works in a message consumer or a CLI.
//
// Module errors embed BaseError, so any of them can be matched with errors.As:
//
//	var base *redisfx.BaseError
//	if errors.As(err, &base) {
//		log.Print(base.Code)
//	}
type BaseError struct {
	// Code is a stable, machine-readable identifier such as
	// "idempotency_key_reused". It never changes between releases.
	Code string
	// Message is a human-readable description.
	Message string
	// Err is the underlying cause, if any.
	Err error
}

// Error implements the error interface.
func (e *BaseError) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

// Unwrap returns the underlying cause.
func (e *BaseError) Unwrap() error { return e.Err }

// As lets errors.As find the *BaseError inside any error type that embeds
// BaseError by value (the method is promoted).
func (e *BaseError) As(target any) bool {
	if t, ok := target.(**BaseError); ok {
		*t = e
		return true
	}
	return false
}

// CodeConfigInvalid is the Code of every *ConfigError.
const CodeConfigInvalid = "config_invalid"

// ConfigError reports an invalid configuration value. Every module returns
// it from its Config's Validate and fails start-up with it, so an app can
// match any of them with errors.As:
//
//	var cfgErr *redisfx.ConfigError
//	if errors.As(err, &cfgErr) {
//		log.Printf("fix %s in package %s", cfgErr.Field, cfgErr.Package)
//	}
type ConfigError struct {
	BaseError
	// Package is the module's package: "idempotencyfx", "storefx" …
	Package string
	// Field names the setting as the user wrote it: a Config field
	// ("Config.LockTimeout", "Config.Exporter.Endpoint", "Config.Addrs[1]")
	// or an environment variable ("REDIS_URL").
	Field string
	// Reason says what is wrong with the value; it never repeats a secret.
	Reason string
}

// NewConfigError returns the error for an invalid field of package pkg.
func NewConfigError(pkg, field, reason string) *ConfigError {
	msg := pkg + ": invalid " + field + ": " + reason
	return &ConfigError{BaseError: BaseError{Code: CodeConfigInvalid, Message: msg}, Package: pkg, Field: field, Reason: reason}
}
