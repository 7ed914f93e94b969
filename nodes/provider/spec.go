package provider

import "context"

// spec makes a kind from typed functions over the inputs I. A nil Update
// means every change replaces.
type spec[I any] struct {
	Validate func(*I) error
	Create   func(context.Context, *Env, *I) (string, map[string]any, error)
	Read     func(context.Context, *Env, string, *I, map[string]any) (map[string]any, error)
	Update   func(context.Context, *Env, string, *I, *I, map[string]any) (map[string]any, error)
	Delete   func(context.Context, *Env, string, *I, map[string]any) error
	Replaces []string
	Secrets  []string
}

func (s spec[I]) newInputs() any        { return new(I) }
func (s spec[I]) validate(in any) error { return s.Validate(in.(*I)) }
func (s spec[I]) create(ctx context.Context, env *Env, in any) (string, map[string]any, error) {
	return s.Create(ctx, env, in.(*I))
}
func (s spec[I]) read(ctx context.Context, env *Env, id string, in any, st map[string]any) (map[string]any, error) {
	if s.Read == nil {
		return st, nil
	}
	return s.Read(ctx, env, id, in.(*I), st)
}
func (s spec[I]) update(ctx context.Context, env *Env, id string, olds, news any, st map[string]any) (map[string]any, error) {
	return s.Update(ctx, env, id, olds.(*I), news.(*I), st)
}
func (s spec[I]) delete(ctx context.Context, env *Env, id string, in any, st map[string]any) error {
	if s.Delete == nil {
		return nil
	}
	return s.Delete(ctx, env, id, in.(*I), st)
}
func (s spec[I]) replaces() []string {
	if s.Update != nil {
		return s.Replaces
	}
	var all []string
	for i := range fieldsOf(new(I)) {
		all = append(all, i)
	}
	return all
}
func (s spec[I]) secrets() []string { return s.Secrets }
