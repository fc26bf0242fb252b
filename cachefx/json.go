package cachefx

import (
	"context"
	"encoding/json"
	"time"
)

// GetJSON reads key and decodes its JSON value into a T.
func GetJSON[T any](ctx context.Context, c *Cache, key string) (value T, found bool, err error) {
	b, found, err := c.Get(ctx, key)
	if err != nil || !found {
		return value, found, err
	}
	err = json.Unmarshal(b, &value)
	return value, err == nil, err
}

// SetJSON stores value encoded as JSON (see Cache.Set).
func SetJSON[T any](ctx context.Context, c *Cache, key string, value T, ttl time.Duration, tags ...string) error {
	b, err := json.Marshal(value)
	if err != nil {
		return err
	}
	return c.Set(ctx, key, b, ttl, tags...)
}

// GetOrLoadJSON is Cache.GetOrLoad for a typed value stored as JSON.
func GetOrLoadJSON[T any](ctx context.Context, c *Cache, key string, ttl time.Duration, load func(context.Context) (T, error), tags ...string) (T, error) {
	var value T
	b, err := c.GetOrLoad(ctx, key, ttl, func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}, tags...)
	if err != nil && b == nil {
		return value, err
	}
	if uerr := json.Unmarshal(b, &value); uerr != nil {
		return value, uerr
	}
	return value, err
}
